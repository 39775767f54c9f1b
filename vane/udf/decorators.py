"""``@vane.func``, ``@vane.cls`` and ``@vane.method``: each works with or without parentheses,
and ``.batch`` marks a function or method that takes Arrow arrays instead of single values.

>>> import vane
>>> @vane.func(return_dtype="BIGINT")
... def length(text):
...     return len(text)
>>> vane.from_pydict({"t": ["ab", "c"]}).select(length(vane.col("t"))).to_pylist()
[{'t': 2}, {'t': 1}]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from vane._arguments import checked
from vane.errors import ConfigurationError
from vane.udf.column import (
    METHOD_ATTRIBUTE,
    ClassUdf,
    ColumnUdf,
    MethodInfo,
    UdfOptions,
    make_column_udf,
)

F = TypeVar("F", bound=Callable[..., Any])


def _func(
    fn: Callable[..., Any] | None,
    *,
    batch: bool,
    return_dtype: Any,
    options: UdfOptions,
) -> Any:
    def wrap(target: Callable[..., Any]) -> ColumnUdf:
        if isinstance(target, type) or not callable(target):
            raise ConfigurationError(
                f"@vane.func decorates a function; {target!r} is not one (use @vane.cls for a "
                "class)"
            )
        return make_column_udf(
            target,
            name=getattr(target, "__qualname__", None) or repr(target),
            return_dtype=return_dtype,
            batch=batch,
            options=options,
        )

    return wrap if fn is None else wrap(fn)


class _FuncDecorator:
    """``@vane.func``, ``@vane.func(return_dtype=..., ...)``, ``@vane.func.batch(...)``.

    Options: ``return_dtype`` (a DuckDB type name or pyarrow type; else the return annotation),
    ``max_concurrency`` (rows in flight for an ``async def``), ``batch_size``, ``use_process``
    (run in subprocess actors), ``max_retries``, ``on_error`` ("raise", "null", "skip"),
    ``batch_timeout_s`` (seconds for one batch of rows; an overrun fails that batch),
    ``error_column`` (with ``on_error="null"``: a column that gets each failing row's error)."""

    @overload
    def __call__(self, fn: Callable[..., Any], /) -> ColumnUdf: ...
    @overload
    def __call__(
        self,
        fn: None = None,
        /,
        *,
        return_dtype: Any = None,
        max_concurrency: int | None = None,
        batch_size: int | None = None,
        use_process: bool = False,
        max_retries: int = 0,
        on_error: str = "raise",
        batch_timeout_s: float | None = None,
        error_column: str | None = None,
    ) -> Callable[[Callable[..., Any]], ColumnUdf]: ...

    @checked
    def __call__(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        return_dtype: Any = None,
        max_concurrency: int | None = None,
        batch_size: int | None = None,
        use_process: bool = False,
        max_retries: int = 0,
        on_error: str = "raise",
        batch_timeout_s: float | None = None,
        error_column: str | None = None,
    ) -> Any:
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise ConfigurationError(
                "@vane.func(max_concurrency=...) is how many rows of an async def one actor runs "
                f"at once: a positive integer, got {max_concurrency!r}"
            )
        options = UdfOptions(
            batch_size,
            max_concurrency,
            0,
            use_process,
            max_retries,
            on_error,
            batch_timeout_s=batch_timeout_s,
            error_column=error_column,
        )
        return _func(fn, batch=False, return_dtype=return_dtype, options=options)

    @checked
    def batch(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        return_dtype: Any = None,
        batch_size: int | None = None,
        use_process: bool = False,
        max_retries: int = 0,
        on_error: str = "raise",
        batch_timeout_s: float | None = None,
        error_column: str | None = None,
    ) -> Any:
        """A function over Arrow arrays (one per column argument) that returns an array, list
        or numpy array with one value per row."""
        options = UdfOptions(
            batch_size,
            None,
            0,
            use_process,
            max_retries,
            on_error,
            batch_timeout_s=batch_timeout_s,
            error_column=error_column,
        )
        return _func(fn, batch=True, return_dtype=return_dtype, options=options)


func = _FuncDecorator()


@checked
def cls(
    target: type | None = None,
    /,
    *,
    gpus: float = 0,
    max_concurrency: int | tuple[int, int] | None = None,
    use_process: bool = False,
    batch_size: int | None = None,
    max_retries: int = 0,
    on_error: str = "raise",
    batch_timeout_s: float | None = None,
    error_column: str | None = None,
) -> Any:
    """A class whose instances are built once per actor, inside the worker, and whose
    ``__call__`` and methods compute columns.

    ``gpus`` per actor, ``max_concurrency`` actors (or ``(min, max)``), ``use_process=True`` for
    subprocess actors (own GIL), ``batch_size`` rows per call of a batch method, and the fault
    policy ``max_retries`` / ``on_error`` / ``batch_timeout_s`` (seconds for one batch of the
    step, as in map_batches: an overrun is a failure of that batch); with ``on_error="null"``,
    ``error_column`` names a column that gets each failing row's error text.
    """
    options = UdfOptions(
        batch_size,
        max_concurrency,
        gpus,
        use_process,
        max_retries,
        on_error,
        batch_timeout_s=batch_timeout_s,
        error_column=error_column,
    )

    def wrap(klass: type) -> ClassUdf:
        if not isinstance(klass, type):
            raise ConfigurationError(f"@vane.cls decorates a class, got {klass!r}")
        return ClassUdf(klass, options)

    return wrap if target is None else wrap(target)


class _MethodDecorator:
    """``@vane.method`` / ``@vane.method(return_dtype=...)`` marks a row method of a
    ``@vane.cls`` class; ``@vane.method.batch(return_dtype=...)`` a method over Arrow arrays."""

    def __call__(self, fn: F | None = None, /, *, return_dtype: Any = None) -> Any:
        return _mark(fn, MethodInfo(return_dtype, batch=False))

    def batch(self, fn: F | None = None, /, *, return_dtype: Any = None) -> Any:
        return _mark(fn, MethodInfo(return_dtype, batch=True))


def _mark(fn: Callable[..., Any] | None, info: MethodInfo) -> Any:
    def wrap(target: F) -> F:
        if not inspect.isfunction(target):
            raise ConfigurationError(f"@vane.method decorates a method, got {target!r}")
        setattr(target, METHOD_ATTRIBUTE, info)
        return target

    return wrap if fn is None else wrap(fn)


method = _MethodDecorator()
