"""Walking and rebuilding plans.

A plan is a tree in the user's mind but a DAG in memory: ``u.join(u, on="id")`` reads the same
node twice. Node identity is what says "the same subplan"; whoever rewrites a plan keeps it
(one rewrite per node, not one per parent), and the runner computes a shared subplan once.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator

from vane.plan.nodes import ArrowStreamScan, PlanNode, UdfStep

# The dataclass fields that hold a node's inputs, in the order of ``node.inputs``.
_INPUT_FIELDS = ("input", "left", "right")


def with_inputs(node: PlanNode, inputs: tuple[PlanNode, ...]) -> PlanNode:
    """A copy of ``node`` reading ``inputs`` instead (it validates itself again)."""
    if hasattr(node, "named_inputs"):
        names = [name for name, _ in node.named_inputs]
        return dataclasses.replace(node, named_inputs=tuple(zip(names, inputs, strict=True)))  # type: ignore[type-var]
    fields = [f.name for f in dataclasses.fields(node) if f.name in _INPUT_FIELDS]  # type: ignore[arg-type]
    return dataclasses.replace(node, **dict(zip(fields, inputs, strict=True)))  # type: ignore[type-var]


def walk(plan: PlanNode) -> Iterator[PlanNode]:
    """Every node of the plan once, parents before their inputs."""
    seen: set[int] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            yield node
            stack.extend(reversed(node.inputs))


def references(plan: PlanNode) -> Counter[int]:
    """How many parents read each node (by identity); the root counts once."""
    counts: Counter[int] = Counter({id(plan): 1})
    seen: set[int] = set()

    def visit(node: PlanNode) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for child in node.inputs:
            counts[id(child)] += 1
            visit(child)

    visit(plan)
    return counts


def shared_subplans(plan: PlanNode) -> set[int]:
    """The nodes read by more than one parent that must run once: they hold a UDF step (a model
    must not run twice, nor give two answers) or a stream that can be read only once. Shared
    plain SQL is left to DuckDB, which recomputes it."""
    counts = references(plan)
    costly: dict[int, bool] = {}

    def holds_work(node: PlanNode) -> bool:
        if id(node) not in costly:
            below = [holds_work(child) for child in node.inputs]  # every child: fills `costly`
            costly[id(node)] = isinstance(node, (UdfStep, ArrowStreamScan)) or any(below)
        return costly[id(node)]

    holds_work(plan)
    return {key for key, count in counts.items() if count > 1 and costly.get(key, False)}
