"""``explain()``: the plan as deterministic text, one line per step, the final step first.

A UDF step's line says how it runs (backend, batch size, actors, GPUs...). Before the
optimizer lifts column UDF calls into steps of their own, the line of the step that holds the
calls says the same of each step-to-be, in brackets: ``[embed: backend=thread ...]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vane.plan.nodes import PlanNode, SqlStep, execution_fields

if TYPE_CHECKING:
    from vane.udf.column import ColumnUdf


def explain(
    node: PlanNode,
    placement: Mapping[int, str] | None = None,
    notes: Mapping[int, str] | None = None,
) -> str:
    """Each step on its own line, inputs indented under the step that reads them; with a
    runner's ``placement`` (by node identity), each line ends with where the step runs, and
    with ``notes`` (``explain(analyze=True)``: what a step did in a run) with those."""
    lines: list[str] = []
    where = placement or {}
    said = notes or {}

    def visit(current: PlanNode, depth: int) -> None:
        place = where.get(id(current))
        note = said.get(id(current))
        lines.append(
            "  " * depth
            + current.describe()
            + _udf_calls(current)
            + (f"  @ {place}" if place else "")
            + (f"  -- {note}" if note else "")
        )
        for child in current.inputs:
            visit(child, depth + 1)

    visit(node, 0)
    return "\n".join(lines)


def _udf_calls(node: PlanNode) -> str:
    """How the column UDF calls in ``node``'s expressions will run, one bracket per UDF step
    they become (calls on one ``@vane.cls`` instance share one), in order of appearance."""
    if not isinstance(node, SqlStep):
        return ""
    from vane.plan.udf_steps import column_udf, step_key

    steps: dict[int, list[ColumnUdf]] = {}
    for expr in node.expressions():
        for call in expr.udf_calls():
            udf = column_udf(call)
            steps.setdefault(step_key(udf), []).append(udf)
    return "".join(
        f"  [{', '.join(dict.fromkeys(udf.name for udf in udfs))}: {' '.join(_fields(udfs))}]"
        for udfs in steps.values()
    )


def _fields(udfs: list[ColumnUdf]) -> list[str]:
    from vane.plan.udf_steps import step_options
    from vane.udf.build import default_backend
    from vane.udf.column_calls import DEFAULT_ASYNC_ROWS

    first = udfs[0]
    options = step_options(first)
    concurrency = options["concurrency"]
    # An async function's max_concurrency is how many rows it has in flight per actor.
    rows = first.options.max_concurrency or DEFAULT_ASYNC_ROWS
    return execution_fields(
        backend=options["execution_backend"] or default_backend(options["gpus"]),
        batch_size=options["batch_size"],
        actors=concurrency if isinstance(concurrency, tuple) else (concurrency, concurrency),
        gpus=options["gpus"],
        is_async=any(udf.is_async for udf in udfs),
        async_limit="" if first.owner is not None else f"max_concurrency={rows}",
        max_retries=options["max_retries"],
        on_error=options["on_error"],
        batch_timeout_s=options["batch_timeout_s"],
    )
