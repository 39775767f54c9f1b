"""The state every part of a ``Relation`` shares: the plan it wraps, and what the plan's
schema says without running it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from vane.plan import nodes

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class RelationBase:
    """A logical plan, held: the verbs, actions and writes of ``Relation`` build on it."""

    __slots__ = ("_plan",)

    def __init__(self, plan: nodes.PlanNode) -> None:
        if not isinstance(plan, nodes.PlanNode):
            raise TypeError("Relation wraps a plan node; build one with vane.read_parquet, ...")
        self._plan = plan

    def _derive(self, plan: nodes.PlanNode) -> Self:
        """A new relation of this class over ``plan``: verbs never change the one they are on."""
        return type(self)(plan)

    # ---- properties: known without running the data path ---------------------------------

    @property
    def plan(self) -> nodes.PlanNode:
        """The logical plan this relation runs."""
        return self._plan

    @property
    def schema(self) -> pa.Schema:
        """The output schema, derived from the plan without reading data."""
        return self._plan.schema

    @property
    def columns(self) -> list[str]:
        return list(self._plan.schema.names)
