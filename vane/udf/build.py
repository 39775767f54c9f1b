"""Building a UDF step's spec from a verb's arguments: every argument is checked when the step
is built, before anything runs, and each error says how to fix it. Kept apart from the spec
itself (``vane.udf.spec``) because the last check, that the spec can travel to worker
processes, needs the pickling code, which needs the spec."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Mapping
from typing import Any

from vane._arguments import binding_problems
from vane.errors import ConfigurationError
from vane.udf.shipping import check_shippable
from vane.udf.spec import (
    BACKENDS,
    BATCH_FORMATS,
    DEFAULT_ACTOR_START_TIMEOUT_S,
    DEFAULT_MAX_CONCURRENCY_PER_ACTOR,
    ERROR_COLUMN,
    ON_ERROR,
    Budget,
    Kind,
    UdfSpec,
    callable_name,
    is_async_callable,
)


def _positive_int(verb: str, label: str, value: object, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{verb}(): {label} must be an integer >= {low}, got {value!r}")
    return value


def _seconds(verb: str, label: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(
            f"{verb}(): {label} must be a number of seconds > 0, or None for no limit; got "
            f"{value!r}"
        )
    return float(value)


def _concurrency(verb: str, value: object) -> tuple[int, int]:
    if isinstance(value, tuple) and len(value) == 2:
        low = _positive_int(verb, "concurrency (min)", value[0])
        high = _positive_int(verb, "concurrency (max)", value[1])
        if low > high:
            raise ConfigurationError(
                f"{verb}(): concurrency=(min, max) needs min <= max, got {value!r}"
            )
        return low, high
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{verb}(): concurrency must be a positive number of actors, or (min, max) to "
            f"scale between them; got {value!r}. Use concurrency=1 to run one actor"
        )
    return value, value


def _check_callable(verb: str, fn: object, has_constructor_args: bool) -> None:
    if isinstance(fn, functools.partial):
        if isinstance(fn.func, type):  # unwrapped by build_spec; here only a partial of a partial
            return
        _check_callable(verb, fn.func, has_constructor_args)
        return
    if isinstance(fn, type):
        if fn.__call__ is type.__call__:
            raise ConfigurationError(f"{verb}(): class {fn.__name__} has no __call__ method")
        return
    if inspect.isfunction(fn) or inspect.isbuiltin(fn) or inspect.ismethod(fn):
        if has_constructor_args:
            raise ConfigurationError(
                f"{verb}(): fn_constructor_args/kwargs only apply to a class, and "
                f"{callable_name(fn)} is a function. Use fn_kwargs to pass arguments to it"
            )
        return
    if callable(fn):
        cls = type(fn).__name__
        raise ConfigurationError(
            f"{verb}(): got an instance of {cls}, but vane needs the class itself so that each "
            f"actor constructs its own copy inside the worker that runs it. Pass the class "
            f"{cls} instead of {cls}(...), with its constructor arguments as "
            "fn_constructor_args=(...) or fn_constructor_kwargs={...}"
        )
    raise ConfigurationError(
        f"{verb}(): fn must be a callable class or a function, got {type(fn).__name__}"
    )


def _bind_partial(
    fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """A ``functools.partial`` of a class binds constructor arguments: the class, with those
    arguments in front of (positional) or under (keyword) the step's own."""
    if isinstance(fn, functools.partial) and isinstance(fn.func, type):
        return fn.func, (*fn.args, *args), {**fn.keywords, **(kwargs or {})}
    return fn, args, dict(kwargs or {})


def _signature(target: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or extension type without one: not checked
        return None


def _check_arguments(
    verb: str,
    fn: Any,
    constructor: tuple[tuple[Any, ...], Mapping[str, Any]],
    call: tuple[tuple[Any, ...], Mapping[str, Any]],
) -> None:
    """Constructor and call arguments fit the signatures: checked when the step is built, not
    in an actor later. Each check is (what, callable, leading arguments vane supplies, the
    user's arguments, the options to fix)."""
    name = callable_name(fn)
    if isinstance(fn, type):
        checks = [
            (f"{name}(...)", fn, 0, constructor, "fn_constructor_args/fn_constructor_kwargs"),
            (f"{name}.__call__", fn.__call__, 2, call, "fn_args/fn_kwargs"),  # self, the batch
        ]
    else:
        checks = [(name, fn, 1, call, "fn_args/fn_kwargs")]  # the batch or row
    for what, target, supplied, (args, kwargs), options in checks:
        signature = _signature(target)
        if signature is None:
            continue
        problem = binding_problems(signature, (None,) * supplied + tuple(args), kwargs, supplied)
        if problem is not None:
            raise ConfigurationError(
                f"{verb}(): {what} cannot take the arguments given: {problem}. Its signature "
                f"is {signature}; fix {options}"
            )


def _unwrap_vane_class(
    verb: str, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> tuple[Any, tuple[Any, ...], Mapping[str, Any] | None]:
    """A ``@vane.cls`` class as its class, and an instance of one (``Model(path)``, which
    records its constructor arguments) as its class and those arguments."""
    unwrap = getattr(fn, "__vane_class__", None)
    if not callable(unwrap) or isinstance(fn, type):
        return fn, args, kwargs
    cls, recorded_args, recorded_kwargs = unwrap()
    if not (recorded_args or recorded_kwargs):
        return cls, args, kwargs
    if args or kwargs:
        raise ConfigurationError(
            f"{verb}(): {cls.__name__}(...) already holds constructor arguments; pass them "
            "there or in fn_constructor_args/fn_constructor_kwargs, not both"
        )
    return cls, tuple(recorded_args), dict(recorded_kwargs)


def build_spec(
    verb: str,
    fn: Any,
    *,
    kind: Kind,
    batch_size: int | None,
    execution_backend: str | None,
    concurrency: int | tuple[int, int],
    gpus: float,
    cpus: float | None,
    memory: int | None,
    fn_constructor_args: tuple[Any, ...],
    fn_constructor_kwargs: Mapping[str, Any] | None,
    fn_kwargs: Mapping[str, Any] | None,
    max_concurrency_per_actor: int | None,
    max_retries: int,
    on_error: str,
    preserve_order: bool,
    fn_args: tuple[Any, ...] = (),
    batch_format: str = "pyarrow",
    batch_timeout_s: float | None = None,
    actor_start_timeout_s: float | None = DEFAULT_ACTOR_START_TIMEOUT_S,
    reads: tuple[str, ...] | None = None,
    passthrough: bool = False,
    label: str | None = None,
    error_column: str | None = None,
    hidden_error_column: str | None = None,
    budget: Budget | None = None,
    batch_bytes: int | None = None,
    driver_node: str | None = None,
) -> UdfSpec:
    """Check every argument of a UDF verb and return the spec; errors say how to fix them."""
    for option, value in (
        ("fn_constructor_kwargs", fn_constructor_kwargs),
        ("fn_kwargs", fn_kwargs),
    ):
        if value is not None and not isinstance(value, Mapping):
            raise ConfigurationError(f"{verb}(): {option} must be a dict, got {value!r}")
    for option, positional in (("fn_constructor_args", fn_constructor_args), ("fn_args", fn_args)):
        if not isinstance(positional, (tuple, list)):
            raise ConfigurationError(
                f"{verb}(): {option} must be a tuple of positional arguments, got {positional!r}"
            )
    fn, fn_constructor_args, fn_constructor_kwargs = _unwrap_vane_class(
        verb, fn, fn_constructor_args, fn_constructor_kwargs
    )
    fn, constructor_args, constructor_kwargs = _bind_partial(
        fn, tuple(fn_constructor_args), fn_constructor_kwargs
    )
    _check_callable(verb, fn, bool(constructor_args or constructor_kwargs))
    _check_arguments(
        verb, fn, (constructor_args, constructor_kwargs), (tuple(fn_args), dict(fn_kwargs or {}))
    )
    if batch_format not in BATCH_FORMATS:
        raise ConfigurationError(
            f"{verb}(): batch_format={batch_format!r} is not one of {', '.join(BATCH_FORMATS)}"
        )
    if batch_format == "pandas":
        from vane._deps import require

        require("pandas", extra="pandas")
    if batch_size is not None:
        _positive_int(verb, "batch_size", batch_size)
    if batch_bytes is not None:
        _positive_int(verb, "batch_bytes", batch_bytes)
    low, high = _concurrency(verb, concurrency)
    if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus < 0:
        raise ConfigurationError(
            f"{verb}(): gpus is the number of GPUs per actor and must be >= 0, got {gpus!r}"
        )
    if gpus > 1 and gpus != int(gpus):
        # A share of a device packs onto one device; more than one is whole devices (as Ray).
        raise ConfigurationError(
            f"{verb}(): gpus={gpus!r}: above 1, an actor's GPUs are whole devices (a fraction "
            f"shares one device with other actors). Use gpus={math.ceil(gpus)} or a fraction "
            "below 1"
        )
    if cpus is not None and (not isinstance(cpus, (int, float)) or cpus <= 0):
        raise ConfigurationError(f"{verb}(): cpus must be > 0, got {cpus!r}")
    if memory is not None:
        _positive_int(verb, "memory (bytes)", memory)
    backend = execution_backend if execution_backend is not None else default_backend(gpus)
    if backend not in BACKENDS:
        raise ConfigurationError(
            f"{verb}(): execution_backend={backend!r} is not one of {', '.join(BACKENDS)}"
        )
    if backend == "subprocess_task" and isinstance(fn, type):
        raise ConfigurationError(
            f"{verb}(): execution_backend='subprocess_task' runs a plain function in worker "
            f"processes, any batch on any worker; {fn.__name__} is a class. Use "
            "execution_backend='subprocess_actor' to keep one instance per worker process"
        )
    if on_error not in ON_ERROR:
        raise ConfigurationError(
            f"{verb}(): on_error={on_error!r} is not one of {', '.join(ON_ERROR)}"
        )
    check_error_column(on_error, error_column, f"{verb}()")
    _positive_int(verb, "max_retries", max_retries, allow_zero=True)
    if passthrough and kind == "flat":
        raise ConfigurationError(
            f"{verb}(): a step that keeps its input columns needs one output row per input row, "
            "which flat_map does not give"
        )
    per_actor = (
        DEFAULT_MAX_CONCURRENCY_PER_ACTOR
        if max_concurrency_per_actor is None
        else _positive_int(verb, "max_concurrency_per_actor", max_concurrency_per_actor)
    )
    if max_concurrency_per_actor is not None and not is_async_callable(fn):
        raise ConfigurationError(
            f"{verb}(): max_concurrency_per_actor={max_concurrency_per_actor} sets how many "
            f"calls an async UDF runs at once, and {callable_name(fn)} is synchronous. Use "
            f"concurrency=N to run N actors, or make the function `async def`"
        )
    spec = UdfSpec(
        fn=fn,
        verb=verb,
        kind=kind,
        batch_size=batch_size,
        batch_bytes=batch_bytes,
        backend=backend,  # type: ignore[arg-type]
        min_actors=low,
        max_actors=high,
        gpus=gpus,
        cpus=cpus,
        memory=memory,
        constructor_args=constructor_args,
        constructor_kwargs=constructor_kwargs,
        fn_args=tuple(fn_args),
        fn_kwargs=dict(fn_kwargs or {}),
        batch_format=batch_format,  # type: ignore[arg-type]
        max_concurrency_per_actor=per_actor,
        max_retries=max_retries,
        on_error=on_error,  # type: ignore[arg-type]
        preserve_order=bool(preserve_order),
        reads=tuple(reads) if reads is not None else None,
        passthrough=passthrough,
        batch_timeout_s=_seconds(verb, "batch_timeout_s", batch_timeout_s),
        actor_start_timeout_s=_seconds(verb, "actor_start_timeout_s", actor_start_timeout_s),
        label=label,
        error_column=hidden_error_column or error_column or ERROR_COLUMN,
        error_shown_as=error_column if hidden_error_column else error_column or ERROR_COLUMN,
        budget=budget,
        driver_node=driver_node,
    )
    check_shippable(spec)
    return spec


def default_backend(gpus: float) -> str:
    """The backend of a step that names none: Ray actors under the Ray runner; else a thread,
    or a process for a step that asks for GPUs (each its own ``CUDA_VISIBLE_DEVICES``)."""
    from vane.config import get_config

    if get_config().runner == "ray":
        return "ray_actor"
    return "subprocess_actor" if gpus else "thread"


def check_error_column(on_error: str, error_column: object, where: str) -> None:
    """``error_column`` names the column that keeps each failing row's error, which only
    ``on_error="null"`` keeps."""
    if error_column is None:
        return
    if not isinstance(error_column, str) or not error_column:
        raise ConfigurationError(
            f"{where}: error_column must be a column name, got {error_column!r}"
        )
    if on_error != "null":
        raise ConfigurationError(
            f"{where}: error_column={error_column!r} keeps the error of each row that "
            f"on_error='null' keeps, and on_error is {on_error!r}. Pass on_error='null' too"
        )
