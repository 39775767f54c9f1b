"""Column UDF calls as the plan sees them before they run: the ``ColumnUdf`` a call holds,
which calls share one UDF step, and that step's execution options. ``lift_udf_calls`` builds
the steps from them, ``merge_shared_calls`` merges the steps that will share one, and
``explain()`` shows the options before the calls are lifted."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from vane.errors import PlanError
from vane.ir.expr import UdfCall, display
from vane.udf.spec import Budget

if TYPE_CHECKING:
    from vane.udf.column import ColumnUdf


def column_udf(call: UdfCall) -> ColumnUdf:
    """The column UDF ``call`` calls. An expression holds it as the plan's ``ColumnFunction``
    (its name and type); lifting the call into a step needs all of it."""
    from vane.udf.column import ColumnUdf  # (loaded with the first column UDF, not before)

    if not isinstance(call.udf, ColumnUdf):
        raise PlanError(
            f"the UDF call {display(call)} holds a {type(call.udf).__name__}, not a column UDF; "
            "this is a bug in vane, please report it"
        )
    return call.udf


def step_key(udf: ColumnUdf) -> int:
    """The calls of one step with the same key run in one UDF step: those on one ``@vane.cls``
    instance (one object per actor serves them all), or of one ``@vane.func``."""
    return id(udf.owner) if udf.owner is not None else id(udf.target)


def step_options(udf: ColumnUdf) -> StepOptions:
    """The execution options of the UDF step that runs ``udf``'s calls (``explain()`` shows
    them before the calls are lifted)."""
    options = udf.options
    return StepOptions(
        batch_size=options.batch_size,
        execution_backend=options.backend or ("subprocess_actor" if options.use_process else None),
        concurrency=(options.max_concurrency or 1) if udf.owner is not None else 1,
        gpus=options.gpus,
        max_retries=options.max_retries,
        on_error=options.on_error,
        batch_timeout_s=options.batch_timeout_s,
        budget=options.budget,
        driver_node=options.driver_node,
    )


class StepOptions(TypedDict):
    batch_size: int | None
    execution_backend: str | None
    concurrency: int | tuple[int, int]
    gpus: float
    max_retries: int
    on_error: str
    batch_timeout_s: float | None
    budget: Budget | None
    driver_node: str | None
