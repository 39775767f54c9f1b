"""Each plan node as a lazy DuckDB relation: a source as the relation that reads it (``scan``),
a SQL step as the relation it builds on its inputs' relations (``apply``). Nothing runs here;
the node's data and the expressions' DuckDB spelling (``backend/sql.py``) are all it takes.

``probe=True`` builds a step only to bind it and learn its schema (``backend/binding.py``):
UDF calls still in its expressions stand as typed NULLs, and a SQL query's inputs are
registered under names the caller unregisters once it has the schema.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import singledispatch

import pyarrow as pa

from vane._sql import quote_ident, sql_list
from vane.backend.connection import Cursor, Relation
from vane.backend.sql import select_item, to_sql
from vane.io import readers
from vane.ir.parse import code_tokens
from vane.plan.nodes import (
    Aggregate,
    ArrowScan,
    ArrowStreamScan,
    Distinct,
    Drop,
    FileScan,
    Filter,
    Join,
    Limit,
    MaterializedScan,
    OrderBy,
    PlanNode,
    RangeScan,
    Rename,
    Select,
    SortKey,
    SqlQuery,
    TableScan,
    Union,
    WithColumns,
    group_key_name,
)

_serial = itertools.count()


# ---- sources ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileBinding:
    """What binding a ``FileScan`` learned from DuckDB, kept for every scan of it: the reader's
    options as completed (the JSON reader's column types, ``union_by_name``), where JSON lines
    are (for a remote file), and the columns and types DuckDB read the files as, before vane's
    casts and projection (a scan that reads others finds the files changed)."""

    options: tuple[tuple[str, object], ...]
    records: readers.JsonLines | None
    bound: tuple[list[str], list[str]]


def file_binding(node: FileScan) -> FileBinding:
    binding: FileBinding = node.__dict__["_backend"]
    return binding


def read_files(
    node: FileScan, cursor: Cursor, options: dict[str, object], records: object
) -> Relation:
    """The files as DuckDB reads them together, before vane's casts and projection."""
    paths = readers.duckdb_files(node.files, node.storage)
    return cursor.sql(readers.scan_sql(node.format, paths, options, records))  # type: ignore[arg-type]


def shape_files(node: FileScan, relation: Relation) -> Relation:
    """The files' columns as vane gives them: fixed-size lists restored (Parquet stores them as
    lists), the projection kept."""
    present = {n: t for n, t in node.restore.items() if n in relation.columns}
    if present:
        from vane.types import arrow_to_duckdb

        casts = sql_list(
            f"{quote_ident(n)}::{arrow_to_duckdb(t)} AS {quote_ident(n)}"
            for n, t in present.items()
        )
        relation = relation.project(f"* REPLACE ({casts})")
    if node.columns is not None:
        relation = relation.project(readers.projection(node.columns, relation.columns, node.label))
    return relation


def _columns(names: list[str], types: list[str]) -> str:
    return ", ".join(f"{n} {t}" for n, t in zip(names, types, strict=True))


@singledispatch
def scan(node: PlanNode, cursor: Cursor) -> Relation:
    """The relation that reads the source ``node`` on ``cursor``."""
    raise TypeError(f"cannot scan plan node {type(node).__name__}")


@scan.register
def _(node: FileScan, cursor: Cursor) -> Relation:
    changed = node.vanished()
    if changed is not None:
        raise changed
    return scan_checked(node, cursor)


def scan_checked(node: FileScan, cursor: Cursor) -> Relation:
    """``scan`` of files whose stamps were just checked (``FileScan.vanished``)."""
    binding = file_binding(node)
    relation = read_files(node, cursor, dict(binding.options), binding.records)
    bound = (relation.columns, [str(t) for t in relation.types])
    if bound != binding.bound:  # the stamps missed a change: the schema did not
        raise node.changed(
            f"its columns were {_columns(*binding.bound)}, and now they are {_columns(*bound)}"
        )
    return shape_files(node, relation)


@scan.register
def _(node: ArrowScan, cursor: Cursor) -> Relation:
    return cursor.from_arrow(node.table)


@scan.register
def _(node: ArrowStreamScan, cursor: Cursor) -> Relation:
    return cursor.from_arrow(node.take_reader())


@scan.register
def _(node: TableScan, cursor: Cursor) -> Relation:
    return cursor.from_arrow(node.table.open())


@scan.register
def _(node: MaterializedScan, cursor: Cursor) -> Relation:
    return cursor.from_arrow(node.spool.reader())


@scan.register
def _(node: RangeScan, cursor: Cursor) -> Relation:
    return cursor.sql(f"SELECT range AS id FROM range({int(node.n)})")


def empty(cursor: Cursor, schema: pa.Schema) -> Relation:
    """A relation of no rows with ``schema``, to bind a step against."""
    return cursor.from_arrow(schema.empty_table())


# ---- SQL steps ---------------------------------------------------------------------------------


@singledispatch
def apply(node: PlanNode, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    """The step ``node`` on DuckDB relations of its inputs."""
    raise TypeError(f"cannot lower plan node {type(node).__name__} onto DuckDB")


@apply.register
def _(node: Select, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].project(sql_list(select_item(e, probe=probe) for e in node.exprs))


@apply.register
def _(node: Filter, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].filter(to_sql(node.predicate, probe=probe))


@apply.register
def _(node: WithColumns, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    existing = {n.lower(): n for n in node.input.schema.names}
    replaced: list[str] = []
    added: list[str] = []
    for name, expr in node.items:
        target = existing.get(name.lower())
        item = f"{to_sql(expr, probe=probe)} AS {quote_ident(target or name)}"
        (replaced if target else added).append(item)
    star = f"* REPLACE ({sql_list(replaced)})" if replaced else "*"
    return inputs[0].project(sql_list([star, *added]))


@apply.register
def _(node: Drop, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].project(f"* EXCLUDE ({sql_list([quote_ident(n) for n in node.names])})")


@apply.register
def _(node: Rename, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    renames = dict(node.mapping)
    exprs = [
        f"{quote_ident(n)} AS {quote_ident(renames[n])}" if n in renames else quote_ident(n)
        for n in node.input.schema.names
    ]
    return inputs[0].project(sql_list(exprs))


@apply.register
def _(node: Limit, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].limit(node.n, node.offset)


def sort_key_sql(key: SortKey, *, probe: bool = False) -> str:
    text = to_sql(key.expr, probe=probe) + (" DESC" if key.descending else " ASC")
    if key.nulls_first is not None:
        text += " NULLS FIRST" if key.nulls_first else " NULLS LAST"
    return text


@apply.register
def _(node: OrderBy, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].order(sql_list(sort_key_sql(k, probe=probe) for k in node.keys))


@apply.register
def _(node: Aggregate, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    keys = [to_sql(k) for k in node.group_by]
    named = [
        f"{k} AS {quote_ident(group_key_name(e))}" for k, e in zip(keys, node.group_by, strict=True)
    ]
    return inputs[0].aggregate(
        sql_list(named + [select_item(a) for a in node.aggs]), sql_list(keys)
    )


@apply.register
def _(node: Distinct, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return inputs[0].distinct()


@apply.register
def _(node: Union, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    # Columns are matched by name: the right side is projected into the left's order.
    ordered = inputs[1].project(sql_list([quote_ident(n) for n in node.left.schema.names]))
    return inputs[0].union(ordered)


@apply.register
def _(node: Join, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    left, right = inputs[0].set_alias("l"), inputs[1].set_alias("r")
    if node.on:
        condition = " AND ".join(f"l.{quote_ident(k)} = r.{quote_ident(k)}" for k in node.on)
    else:
        condition = " AND ".join(
            f"{to_sql(lk, probe=probe, table='l')} = {to_sql(rk, probe=probe, table='r')}"
            for lk, rk in zip(node.left_on, node.right_on, strict=True)
        )
    joined = left.join(right, condition, how=node.how)
    if node.how in ("semi", "anti"):
        return joined
    left_names = node.left.schema.names
    exprs = []
    for name in left_names:
        if name in node.on and node.how in ("right", "outer"):
            exprs.append(
                f"coalesce(l.{quote_ident(name)}, r.{quote_ident(name)}) AS {quote_ident(name)}"
            )
        else:
            exprs.append(f"l.{quote_ident(name)}")
    for name in node.right.schema.names:
        if name in node.on:
            continue
        alias = f"{name}_right" if name in left_names else name
        exprs.append(f"r.{quote_ident(name)} AS {quote_ident(alias)}")
    return joined.project(sql_list(exprs))


@apply.register
def _(node: SqlQuery, cursor: Cursor, inputs: list[Relation], probe: bool = False) -> Relation:
    return query(node, cursor, inputs)


def query(
    node: SqlQuery, cursor: Cursor, inputs: list[Relation], registered: list[str] | None = None
) -> Relation:
    """A SQL query over its inputs' relations; the names it registers them under on ``cursor``
    are added to ``registered`` (binding unregisters them once it has the schema)."""
    query = node.lowered or node.query
    if not inputs:
        return cursor.sql(query)
    # Each input is registered on this cursor under a name no other step uses, then exposed
    # to the query under the user's name as a CTE, which shadows any table of that name.
    ctes = []
    for (name, _), relation in zip(node.named_inputs, inputs, strict=True):
        internal = f"_vane_{next(_serial)}_{name}"
        cursor.register(internal, relation)
        if registered is not None:
            registered.append(internal)
        ctes.append(f"{quote_ident(name)} AS (FROM {internal})")
    relation = cursor.sql(with_ctes(query, ctes))
    shown = [c for c in relation.columns if c in node.hidden]  # reached through `*`
    if shown:
        relation = relation.project(f"* EXCLUDE ({sql_list(quote_ident(c) for c in shown)})")
    return relation


def with_ctes(query: str, ctes: list[str]) -> str:
    """``query`` with ``ctes`` defined first: merged into its own WITH clause if it has one
    (found with DuckDB's tokenizer, so comments and letter case are no trouble)."""
    words = code_tokens(query)[:2]
    if words and words[0].word == "WITH":
        keyword = words[1] if len(words) > 1 and words[1].word == "RECURSIVE" else words[0]
        end = keyword.start + len(keyword.word)
        return f"{query[:end]} {sql_list(ctes)}, {query[end:]}"
    return f"WITH {sql_list(ctes)} {query}"
