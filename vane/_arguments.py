"""Calls with arguments a signature does not take, explained: each unexpected keyword with the
closest names the function does take, each missing argument by name.

Python's own ``TypeError`` names one problem (often the missing argument a misspelled keyword
was meant to be) and nothing to do about it. ``checked`` wraps a public function so that a call
that does not fit its signature raises ``ArgumentError`` (a ``ConfigurationError`` and a
``TypeError``) before the function runs; ``binding_problems`` serves callables vane calls for
the user later (a UDF class's constructor, its ``__call__``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from vane.errors import ArgumentError

F = TypeVar("F", bound=Callable[..., Any])


def _keyword_names(signature: inspect.Signature) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def binding_problems(
    signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str | None:
    """Why ``args``/``kwargs`` do not fit ``signature``, in a sentence or two; None if they
    do."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        reason = str(exc)
    else:
        return None
    parameters = signature.parameters
    takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    names = _keyword_names(signature)
    parts = []
    unknown = [k for k in kwargs if k not in parameters and not takes_any_keyword]
    for keyword in unknown:
        close = difflib.get_close_matches(keyword, names, n=2, cutoff=0.6)
        guess = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        parts.append(f"it takes no argument {keyword!r}{guess}")
    if not unknown:
        missing = [
            p.name
            for p in parameters.values()
            if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.name not in kwargs
        ]
        # positional arguments fill the first ones
        positional = sum(
            1 for p in parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        missing = missing[min(len(args), positional) :] if len(args) <= positional else missing
        parts.extend(f"it needs {name}=" for name in missing)
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
