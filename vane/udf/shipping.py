"""Sending a UDF to worker processes: the spec (function or class, constructor arguments,
``fn_kwargs``) travels with cloudpickle, so functions and classes from ``__main__`` and
notebooks work. Some objects cannot travel (a lock, an open file, a connection, a CUDA tensor):
such a step fails when it is built, with the step and the part that cannot be pickled named,
rather than later with pickle's bare ``cannot pickle '_thread.lock' object``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any

from vane.errors import ConfigurationError
from vane.udf.failures import describe_exception
from vane.udf.spec import UdfSpec

# Backends whose actors live in other processes, built from the pickled spec.
SHIPPED_BACKENDS = ("subprocess_actor", "subprocess_task", "ray_actor")


class _Discard:
    """A file that forgets what is written: pickling into it checks, and keeps nothing."""

    def write(self, data: bytes) -> int:
        return len(data)


def check_shippable(spec: UdfSpec) -> None:
    """Fail now, naming the part, if a spec for another process cannot be pickled."""
    if spec.backend in SHIPPED_BACKENDS:
        _dump(spec, _Discard())


def pickled_spec(spec: UdfSpec, extra: dict[str, Any]) -> bytes:
    """The INIT payload of a worker: the pickled spec, with ``extra`` alongside."""
    import cloudpickle

    sink = _Collect()
    _dump(spec, sink)
    data: bytes = cloudpickle.dumps({"spec": bytes(sink.data), **extra})
    return data


class _Collect:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)


def _dump(spec: UdfSpec, file: _Discard | _Collect) -> None:
    import cloudpickle

    try:
        cloudpickle.dump(spec, file)
    except Exception as exc:
        part, value = _culprit(spec)
        raise ConfigurationError(
            f"{spec.verb} step `{spec.name}`: execution_backend={spec.backend!r} sends the "
            f"function to worker processes with cloudpickle, and {part} "
            f"({type(value).__name__}) cannot be pickled: {describe_exception(exc)}. Create it "
            "inside the worker instead: in the class's __init__, which runs once per actor in "
            "its process, or inside the function; or use execution_backend='thread', which "
            "pickles nothing"
        ) from exc


def _pickles(value: Any) -> bool:
    import cloudpickle

    try:
        cloudpickle.dump(value, _Discard())
    except Exception:
        return False
    return True


def _parts(spec: UdfSpec) -> Iterator[tuple[str, Any]]:
    """The pieces a spec carries, smallest first, with how a user would name them."""
    for i, value in enumerate(spec.constructor_args):
        yield f"fn_constructor_args[{i}]", value
    for key, value in spec.constructor_kwargs.items():
        yield f"fn_constructor_kwargs[{key!r}]", value
    for i, value in enumerate(spec.fn_args):
        yield f"fn_args[{i}]", value
    for key, value in spec.fn_kwargs.items():
        yield f"fn_kwargs[{key!r}]", value
    fn = spec.fn
    if isinstance(fn, functools.partial):
        for i, value in enumerate(fn.args):
            yield f"the partial's argument {i}", value
        for key, value in fn.keywords.items():
            yield f"the partial's argument {key!r}", value
        fn = fn.func
    functions = [("", fn)]
    if inspect.isclass(fn):
        for name, value in vars(fn).items():
            if name.startswith("__") and name.endswith("__") and name != "__call__":
                continue
            if inspect.isfunction(value):
                functions.append((f"{fn.__name__}.{name}: ", value))
            else:
                yield f"the class attribute {fn.__name__}.{name}", value
    for owner, function in functions:
        if not inspect.isfunction(function):
            continue
        code = function.__code__
        for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
            try:
                yield (
                    f"{owner}the variable {name!r} captured from the enclosing scope",
                    (cell.cell_contents),
                )
            except ValueError:  # an empty cell
                continue
        for name in code.co_names:
            if name in function.__globals__:
                value = function.__globals__[name]
                if not inspect.ismodule(value):
                    yield f"{owner}the global {name!r} it uses", value


def _culprit(spec: UdfSpec) -> tuple[str, Any]:
    for part, value in _parts(spec):
        if not _pickles(value):
            return part, value
    return f"the function {spec.name} itself", spec.fn
