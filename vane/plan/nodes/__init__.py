"""Logical plan nodes: immutable, self-validating, each deriving its own output schema.

A plan is a tree of nodes. ``Source`` nodes produce data (``sources``); ``SqlStep`` nodes
transform their inputs with DuckDB (``steps``); ``UdfStep`` nodes run a user's function over
batches (``udf``). Every node checks its invariants when it is built and derives its schema by
binding its SQL against empty tables of its inputs' schemas: a bad expression is reported the
moment the user writes it, naming the step, and no data is read to find a schema.

Lowering a node onto DuckDB (``to_duckdb`` for sources, ``apply`` for steps) builds a lazy
``DuckDBPyRelation``; runners decide where and when it executes. (Issue 26 moves that lowering
into one DuckDB backend, so that nodes become plain data.)
"""

from vane.plan.nodes.base import Cursor, JoinHow, PlanNode, Relation
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
    "Cursor",
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
    "Relation",
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
