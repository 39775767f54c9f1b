"""``explain()``: the plan as deterministic text, one line per step, the final step first."""

from __future__ import annotations

from collections.abc import Mapping

from vane.plan.nodes import PlanNode


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
            + (f"  @ {place}" if place else "")
            + (f"  -- {note}" if note else "")
        )
        for child in current.inputs:
            visit(child, depth + 1)

    visit(node, 0)
    return "\n".join(lines)
