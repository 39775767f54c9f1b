"""The logical plan: immutable nodes, their text form, and how to walk them."""

from __future__ import annotations

from vane.plan.explain import explain
from vane.plan.nodes import PlanNode, Source, SqlStep

__all__ = ["PlanNode", "Source", "SqlStep", "explain"]
