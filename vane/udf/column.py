"""Column UDFs: functions and class methods that compute one column from argument columns.

``@vane.func`` turns a function over scalars (or, with ``.batch``, over Arrow arrays) into a
``ColumnUdf``; calling it on expressions builds a ``UdfCall`` expression, which select,
with_column and filter accept like any other. ``@vane.cls`` turns a class into a ``ClassUdf``:
calling it records the constructor arguments (checked against ``__init__`` at once) and
constructs nothing; its instance's ``__call__`` and methods are column UDFs that share one
constructed object per actor. Nothing here runs the user's code: an optimizer rule lifts the
calls into UDF steps, and ``column_calls.ColumnCalls`` runs them inside the actors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vane._arguments import CallArgument, Const
from vane.errors import ConfigurationError, PlanError, SchemaError
from vane.ir.expr import Expr, UdfCall
from vane.types import to_arrow_type
from vane.types.python import python_to_arrow
from vane.udf.build import check_error_column
from vane.udf.spec import Budget

ON_ERROR = ("raise", "skip", "null")


@dataclass(frozen=True)
class UdfOptions:
    """How the actors that run a column UDF are set up (the map_batches options, Daft's names)."""

    batch_size: int | None = None
    max_concurrency: int | tuple[int, int] | None = None  # actors (classes), rows (async funcs)
    gpus: float = 0
    use_process: bool = False
    max_retries: int = 0
    on_error: str = "raise"
    backend: str | None = None  # an execution_backend; overrides use_process
    batch_timeout_s: float | None = None  # per call of the step's batch, as in map_batches
    # A column of the relation that gets each failing row's error text (on_error="null").
    error_column: str | None = None
    budget: Budget | None = None  # what the step may spend (AI functions: max_cost=, ...)
    driver_node: str | None = None  # why its actors run on the driver's machine (None: anywhere)

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ConfigurationError(
                f"on_error={self.on_error!r} is not one of {', '.join(ON_ERROR)}"
            )
        check_error_column(self.on_error, self.error_column, "the UDF")


@dataclass(frozen=True)
class MethodInfo:
    """What ``@vane.method`` recorded on a method of a ``@vane.cls`` class."""

    return_dtype: Any = None
    batch: bool = False


METHOD_ATTRIBUTE = "__vane_method__"


@dataclass(frozen=True, eq=False)
class ColumnUdf:
    """A function, or a method of a recorded class instance, callable on column expressions.

    >>> import vane
    >>> @vane.func
    ... def shout(text: str) -> str:
    ...     return text.upper() + "!"
    >>> rel = vane.from_pydict({"id": [1], "text": ["hi"]})
    >>> rel.with_column("loud", shout(vane.col("text"))).to_pylist()
    [{'id': 1, 'text': 'hi', 'loud': 'HI!'}]
    """

    name: str
    target: Any  # the function; for a method, its name on ``owner``
    return_type: pa.DataType
    batch: bool
    signature: inspect.Signature  # without ``self``
    is_async: bool
    is_generator: bool
    options: UdfOptions = field(default_factory=UdfOptions)
    owner: ClassInstance | None = None

    @property
    def error_column(self) -> str | None:
        return self.options.error_column

    def __call__(self, *args: Any, **kwargs: Any) -> Expr:
        """A ``UdfCall`` expression. Expressions are columns; other values are constants passed
        to every call unchanged; the arity is checked against the function now."""
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PlanError(f"{self.name}() called with the wrong arguments: {exc}") from None
        exprs: list[Expr] = []
        layout: list[CallArgument] = []
        for keyword, value in [(None, a) for a in args] + list(kwargs.items()):
            if isinstance(value, Expr):
                layout.append((keyword, len(exprs)))
                exprs.append(value)
            else:
                layout.append((keyword, Const(value)))
        if not exprs:
            raise PlanError(
                f"{self.name}() needs at least one column argument, such as vane.col('text'); "
                "a call on constants alone has no rows to run on"
            )
        return UdfCall(self, tuple(exprs), tuple(layout))


def return_type_of(fn: Callable[..., Any], declared: Any, where: str) -> pa.DataType:
    """``return_dtype=`` if given, else the function's return annotation."""
    if declared is not None:
        try:
            return to_arrow_type(declared)
        except SchemaError as exc:
            raise SchemaError(f"{where}: return_dtype: {exc}") from None
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception as exc:  # an annotation that does not evaluate
        raise SchemaError(
            f"{where}: its annotations do not evaluate ({exc}); pass return_dtype="
        ) from None
    if "return" not in hints:
        raise SchemaError(
            f"{where} has no return type: annotate it (-> str) or pass return_dtype= such as "
            "'VARCHAR' or 'FLOAT[384]'"
        )
    annotation = hints["return"]
    origin = getattr(annotation, "__origin__", None)
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        # Iterator[T] / Generator[T, ...]: each yielded value is a T.
        args = getattr(annotation, "__args__", None)
        if origin is not None and args:
            annotation = args[0]
    return python_to_arrow(annotation, where)


def make_column_udf(
    fn: Callable[..., Any],
    *,
    name: str,
    return_dtype: Any,
    batch: bool,
    options: UdfOptions,
    owner: ClassInstance | None = None,
    skip_self: bool = False,
) -> ColumnUdf:
    signature = inspect.signature(fn)
    if skip_self:
        parameters = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=parameters)
    is_generator = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
    if is_generator and batch:
        raise ConfigurationError(
            f"{name}: a batch function returns one value per row; a generator that yields "
            "several values per row must be a row function (drop .batch)"
        )
    return ColumnUdf(
        name=name,
        target=fn.__name__ if owner is not None else fn,
        return_type=return_type_of(fn, return_dtype, name),
        batch=batch,
        signature=signature,
        is_async=inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn),
        is_generator=is_generator,
        options=options,
        owner=owner,
    )


@dataclass(frozen=True, eq=False)
class ClassUdf:
    """A class decorated with ``@vane.cls``: calling it records an instance, builds nothing."""

    cls: type
    options: UdfOptions

    def __call__(self, *args: Any, **kwargs: Any) -> ClassInstance:
        if any(isinstance(v, Expr) for v in (*args, *kwargs.values())):
            name = self.cls.__name__
            raise ConfigurationError(
                f"{name}(...) got a column expression: calling a @vane.cls class records its "
                f"constructor arguments, it does not run it. Build an instance, then call it on "
                f"columns: {name}()(col('x')) (or {name}(model_args...)(col('x')))"
            )
        try:
            inspect.signature(self.cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise ConfigurationError(
                f"{self.cls.__name__}(...): the constructor arguments do not fit its __init__: "
                f"{exc}"
            ) from None
        return ClassInstance(self, args, dict(kwargs))

    @property
    def __name__(self) -> str:
        return self.cls.__name__

    def __repr__(self) -> str:
        return f"<vane.cls {self.cls.__qualname__}>"

    def __vane_class__(self) -> tuple[type, tuple[Any, ...], dict[str, Any]]:
        """The class and constructor arguments ``map_batches`` and its kin run it with."""
        return self.cls, (), {}


class ClassInstance:
    """A recorded ``@vane.cls`` instance. Its ``__call__`` and methods build UDF calls; all the
    calls on one instance in a step share one constructed object per actor."""

    def __init__(self, udf: ClassUdf, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        self._udf = udf
        self.args = args
        self.kwargs = dict(kwargs)

    @property
    def cls(self) -> type:
        return self._udf.cls

    @property
    def options(self) -> UdfOptions:
        return self._udf.options

    def construct(self) -> Any:
        """The user's object; only ever called inside an actor."""
        return self.cls(*self.args, **self.kwargs)

    def __vane_class__(self) -> tuple[type, tuple[Any, ...], dict[str, Any]]:
        """The class and the recorded constructor arguments: ``rel.map_batches(Model(path))``
        runs ``Model`` constructed with ``path`` in each actor."""
        return self.cls, self.args, self.kwargs

    def method(self, name: str) -> ColumnUdf:
        fn = getattr(self.cls, name, None)
        if fn is None or not callable(fn):
            raise PlanError(f"{self.cls.__name__} has no method {name!r}")
        info: MethodInfo = getattr(fn, METHOD_ATTRIBUTE, MethodInfo())
        label = f"{self.cls.__name__}" if name == "__call__" else f"{self.cls.__name__}.{name}"
        return make_column_udf(
            fn,
            name=label,
            return_dtype=info.return_dtype,
            batch=info.batch,
            options=self.options,
            owner=self,
            skip_self=True,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Expr:
        if not any("__call__" in vars(k) for k in self.cls.__mro__[:-1]):
            raise PlanError(
                f"{self.cls.__name__} has no __call__; call one of its methods on columns, "
                f"such as instance.method(vane.col('x'))"
            )
        return self.method("__call__")(*args, **kwargs)

    def __getattr__(self, name: str) -> ColumnUdf:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.method(name)

    def __repr__(self) -> str:
        return f"<vane.cls instance of {self.cls.__qualname__}>"
