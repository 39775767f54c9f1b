"""A plan node's schema, as DuckDB binds it: each node is bound once, when it is built, and
nothing is read to find a schema (a step is bound against empty tables of its inputs' schemas;
files by their footers and DuckDB's scan of their headers).

Plan nodes call ``bind`` through ``plan/nodes/base.py`` (which knows this module by name only):
the plan holds no DuckDB object, and this backend is the one place that asks DuckDB what a
node's columns are.
"""

from __future__ import annotations

from functools import singledispatch

import pyarrow as pa

from vane import _engine
from vane._sql import duckdb_message, sql_list
from vane.backend.compile import (
    FileBinding,
    apply,
    empty,
    query,
    read_files,
    shape_files,
)
from vane.backend.connection import Error, Relation
from vane.backend.sql import to_sql
from vane.errors import PlanError, SourceError
from vane.io import readers
from vane.io.combine import check_files
from vane.plan.nodes import FileScan, PlanNode, SqlQuery, SqlStep, TableScan


@singledispatch
def bind(node: PlanNode) -> pa.Schema:
    """The schema of ``node``, as DuckDB gives it back."""
    raise TypeError(f"no DuckDB binding for plan node {type(node).__name__}")


@bind.register
def _(node: SqlStep) -> pa.Schema:
    with _engine.scratch() as cursor:
        registered: list[str] = []
        try:
            empties = [empty(cursor, child.schema) for child in node.inputs]
            _check_udf_arguments(node, empties)
            if isinstance(node, SqlQuery):
                relation = query(node, cursor, empties, registered)
            else:
                relation = apply(node, cursor, empties, probe=True)
            schema: pa.Schema = relation.limit(0).to_arrow_table().schema
        except Error as exc:
            fits = "does not fit its input" if node.inputs else "does not bind"
            raise PlanError(
                f"step `{node.describe()}` {fits}: {duckdb_message(exc)}{node.columns_note()}"
            ) from exc
        finally:
            for view in registered:
                cursor.unregister(view)
    return schema


def _check_udf_arguments(node: SqlStep, empties: list[Relation]) -> None:
    """Bind each UDF call's arguments on their own first: a bad column then gets DuckDB's
    plain "not found" rather than a message about the call's output name."""
    for call in (c for e in node.expressions() for c in e.udf_calls()):
        try:
            empties[0].project(sql_list(to_sql(a, probe=True) for a in call.args)).limit(0)
        except Error as exc:
            raise PlanError(
                f"step `{node.describe()}`: the arguments of {call.udf.name} do not fit the "
                f"input: {duckdb_message(exc)}{node.columns_note()}"
            ) from exc


@bind.register
def _(node: TableScan) -> pa.Schema:
    cursor = _engine.cursor()
    try:  # the schema as DuckDB gives it back, found without reading a row
        schema: pa.Schema = empty(cursor, node.table.schema).limit(0).to_arrow_table().schema
    except Error as exc:
        raise SourceError(f"cannot read `{node.describe()}`: {duckdb_message(exc)}") from exc
    finally:
        cursor.close()
    return schema


@bind.register
def _(node: FileScan) -> pa.Schema:
    options = dict(node.options)
    typed = readers.typed_columns(node.format, options)
    cursor = _engine.cursor()
    try:
        records = None
        if node.format == "json":
            stamps = node.stamps or {}
            sizes = [stamps.get(f, (0, 0, 1, 0))[2] for f in node.files]
            options, records = readers.complete_json_options(
                cursor,
                readers.duckdb_files(node.files, node.storage),
                options,
                sizes if node.storage is not None else None,
            )
        relation = read_files(node, cursor, options, records)
        bound = (relation.columns, [str(t) for t in relation.types])
        object.__setattr__(
            node, "_backend", FileBinding(tuple(sorted(options.items())), records, bound)
        )
        schema: pa.Schema = shape_files(node, relation).limit(0).to_arrow_table().schema
        if len(node.files) > 1:  # the types the files are combined into, before vane's casts
            combined = relation.limit(0).to_arrow_table().schema
            skip = typed | (set(combined.names) - set(node.columns or combined.names))
            check_files(
                cursor,
                node.format,
                readers.duckdb_files(node.files, node.storage),
                options,
                label=node.label,
                combined=combined,
                schemas=node.differing,
                skip=skip,
            )
    except Error as exc:
        raise node.vanished() or SourceError(
            f"cannot read `{node.describe()}`: {duckdb_message(exc)}"
        ) from exc
    finally:
        cursor.close()
    return schema
