"""Calls with arguments a signature does not take, explained: each unexpected keyword with the
closest names the function does take, each missing argument by name.

Python's own ``TypeError`` names one problem (often the missing argument a misspelled keyword
was meant to be) and nothing to do about it. ``checked`` wraps a public function so that a call
that does not fit its signature raises ``ArgumentError`` (a ``ConfigurationError`` and a
``TypeError``) before the function runs; ``binding_problems`` serves callables vane calls for
the user later (a UDF class's constructor, its ``__call__``). A call recorded now and made later
(a column UDF's, in an expression) keeps its arguments as ``CallArgument``s.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from vane.errors import ArgumentError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, eq=False)
class Const:
    """An argument that is a Python value rather than a column: passed to every call as is."""

    value: Any


# One argument of a recorded call, in call order: its keyword (None: positional) and where its
# value comes from: the index of one of the call's argument columns, or a constant.
CallArgument = tuple[str | None, int | Const]


def _keyword_names(signature: inspect.Signature) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def binding_problems(
    signature: inspect.Signature,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    supplied: int = 0,
) -> str | None:
    """Why ``args``/``kwargs`` do not fit ``signature``, in a sentence or two; None if they
    do. The first ``supplied`` of ``args`` are vane's own (a batch, ``self``): they are not
    counted or listed as the user's."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        reason = str(exc)
    else:
        return None
    parameters = list(signature.parameters.values())
    kinds = inspect.Parameter
    positional = [
        p for p in parameters if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    takes_any_keyword = any(p.kind is kinds.VAR_KEYWORD for p in parameters)
    takes_any_positional = any(p.kind is kinds.VAR_POSITIONAL for p in parameters)
    names = [
        p.name
        for p in parameters[supplied:]
        if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
    ]
    parts = []
    for keyword in kwargs:
        if keyword in signature.parameters or takes_any_keyword:
            continue
        close = difflib.get_close_matches(keyword, names, n=2, cutoff=0.6)
        guess = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        parts.append(f"it takes no argument {keyword!r}{guess}")
    if not parts and len(args) > len(positional) and not takes_any_positional:
        parts.append(
            f"too many positional arguments: it takes {len(positional) - supplied}, and "
            f"{len(args) - supplied} were given"
        )
    if not parts:
        filled = {p.name for p in positional[: len(args)]} | set(kwargs)
        missing = [
            p.name
            for p in parameters
            if p.default is p.empty
            and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
            and p.name not in filled
        ]
        parts.extend(f"missing a required argument: {name!r}" for name in missing)
    if not parts:
        parts.append(reason)
    return "; ".join(parts) + f". It takes ({', '.join(names)})"


def checked(fn: F) -> F:
    """``fn``, raising ``ArgumentError`` with the fix for a call its signature does not take
    (before ``fn`` runs, so a ``TypeError`` from inside ``fn`` is never mistaken for one)."""
    signature = inspect.signature(fn)
    parameters = list(signature.parameters.values())
    is_method = bool(parameters) and parameters[0].name == "self"
    shown = signature.replace(parameters=parameters[1:]) if is_method else signature
    label = fn.__name__ if fn.__name__ != "__call__" else fn.__qualname__.split(".")[0]
    label = label.strip("_").removesuffix("Decorator").lower()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            given = args[1:] if is_method else args
            problem = binding_problems(shown, given, kwargs)
            raise ArgumentError(f"{label}(): {problem}") from None
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
