"""Logical plan nodes: immutable, self-validating, each deriving its own output schema.

A plan is a tree of nodes. ``Source`` nodes produce data (``sources``); ``SqlStep`` nodes
transform their inputs with SQL (``steps``); ``UdfStep`` nodes run a user's function over
batches (``udf``). Every node checks its invariants when it is built and takes its schema from
the backend, which binds the step against empty tables of its inputs' schemas: a bad
expression is reported the moment the user writes it, naming the step, and no data is read to
find a schema.

Nodes are plain data: they hold no DuckDB object and no DuckDB text. The backend
(``vane/backend/``) binds them and lowers them onto DuckDB; runners decide where and when the
result executes.
"""

from vane.plan.nodes.base import JoinHow, PlanNode
from vane.plan.nodes.sources import (
    ArrowScan,
    ArrowStreamScan,
    FileScan,
    LedgerScan,
    MaterializedScan,
    RangeScan,
    Source,
    TableScan,
)
from vane.plan.nodes.steps import (
    Aggregate,
    Distinct,
    Drop,
    Filter,
    Join,
    Limit,
    OrderBy,
    Rename,
    Select,
    SortKey,
    SqlQuery,
    SqlStep,
    Union,
    WithColumns,
    group_key_name,
)
from vane.plan.nodes.udf import InferredSchema, UdfStep, execution_fields

__all__ = [
    "Aggregate",
    "ArrowScan",
    "ArrowStreamScan",
    "Distinct",
    "Drop",
    "FileScan",
    "Filter",
    "InferredSchema",
    "Join",
    "JoinHow",
    "LedgerScan",
    "Limit",
    "MaterializedScan",
    "OrderBy",
    "PlanNode",
    "RangeScan",
    "Rename",
    "Select",
    "SortKey",
    "Source",
    "SqlQuery",
    "SqlStep",
    "TableScan",
    "UdfStep",
    "Union",
    "WithColumns",
    "execution_fields",
    "group_key_name",
]
