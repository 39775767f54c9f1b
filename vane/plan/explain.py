"""``explain()``: the plan as deterministic text, one line per step, the final step first."""

from __future__ import annotations

from vane.plan.nodes import PlanNode


def explain(node: PlanNode) -> str:
    """Each step on its own line, inputs indented under the step that reads them."""
    lines: list[str] = []

    def visit(current: PlanNode, depth: int) -> None:
        lines.append("  " * depth + current.describe())
        for child in current.inputs:
            visit(child, depth + 1)

    visit(node, 0)
    return "\n".join(lines)
