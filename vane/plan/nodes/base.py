"""The base of every plan node. A node is plain data; its schema is bound by the backend
(``vane/backend/binding.py``) when the node is built."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Literal

import pyarrow as pa

from vane.errors import PlanError, SchemaError

JoinHow = Literal["inner", "left", "right", "outer", "semi", "anti"]


class PlanNode:
    """Base of all plan nodes. Subclasses are frozen dataclasses."""

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return ()

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = self.__dict__["_schema"]
        return schema

    def _bind(self) -> None:
        """Take the schema the backend binds for this node (no data is read)."""
        self._set_schema(_binder()(self))

    def _set_schema(self, schema: pa.Schema) -> None:
        names = schema.names
        if "" in names:
            raise SchemaError(
                f"step `{self.describe()}` has a column with an empty name (column "
                f"{names.index('')}), which DuckDB cannot hold: it would come back under a name "
                "of DuckDB's choosing (v0, v1, ...). Give every column a name"
            )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PlanError(
                f"step `{self.describe()}` produces column(s) {duplicates} more than once; "
                "give each output column a unique name (for example with AS)"
            )
        object.__setattr__(self, "_schema", schema)

    @property
    def row_local(self) -> bool:
        """Whether each output row depends on one input row (or one batch of them) alone, so
        the step can run on any split of its input (a Ray block, a batch) and give the same
        rows: select, filter, with_column, drop, rename and UDF steps whose expressions hold no
        aggregate, window or subquery. Joins, aggregates, sorts, limits, unions, distinct
        and SQL queries need all rows."""
        return False

    def describe(self) -> str:
        """One line: the step's kind and its key fields."""
        raise NotImplementedError


def check_columns(step: str, names: Sequence[str], node: PlanNode) -> None:
    """A step that names columns its input lacks fails as it is built, naming them."""
    missing = [n for n in names if n not in node.schema.names]
    if missing:
        raise PlanError(
            f"{step}(): no column named {', '.join(map(repr, missing))}; "
            f"the input has {', '.join(node.schema.names)}"
        )


_bind_schema: Callable[[PlanNode], pa.Schema] | None = None


def _binder() -> Callable[[PlanNode], pa.Schema]:
    """The backend's ``bind``: known here by name only, because the backend sits above the plan
    (it compiles nodes) and binding a node is the one thing the plan asks of it."""
    global _bind_schema
    if _bind_schema is None:
        _bind_schema = import_module("vane.backend.binding").bind
    return _bind_schema
