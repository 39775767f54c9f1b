"""Walking and rebuilding plans."""

from __future__ import annotations

import dataclasses

from vane.plan.nodes import PlanNode

# The dataclass fields that hold a node's inputs, in the order of ``node.inputs``.
_INPUT_FIELDS = ("input", "left", "right")


def with_inputs(node: PlanNode, inputs: tuple[PlanNode, ...]) -> PlanNode:
    """A copy of ``node`` reading ``inputs`` instead (it validates itself again)."""
    if hasattr(node, "named_inputs"):
        names = [name for name, _ in node.named_inputs]
        return dataclasses.replace(node, named_inputs=tuple(zip(names, inputs, strict=True)))  # type: ignore[type-var]
    fields = [f.name for f in dataclasses.fields(node) if f.name in _INPUT_FIELDS]  # type: ignore[arg-type]
    return dataclasses.replace(node, **dict(zip(fields, inputs, strict=True)))  # type: ignore[type-var]
