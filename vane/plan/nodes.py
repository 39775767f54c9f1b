"""Logical plan nodes: immutable, self-validating, each deriving its own output schema.

A plan is a tree of nodes. ``Source`` nodes produce data; ``SqlStep`` nodes transform their inputs
with DuckDB. Every node checks its invariants when it is built and derives its schema by binding its
SQL against empty tables of its inputs' schemas: a bad expression is reported the moment the user
writes it, naming the step, and no data is read to find a schema.

Lowering a node onto DuckDB (``to_duckdb`` for sources, ``apply`` for steps) builds a lazy
``DuckDBPyRelation``; runners decide where and when it executes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import duckdb
import pyarrow as pa

from vane import _engine
from vane._sql import duckdb_message, quote_ident, sql_list
from vane.errors import PlanError, SourceError
from vane.udf.spec import UdfSpec, output_schema

Relation = duckdb.DuckDBPyRelation
Cursor = duckdb.DuckDBPyConnection
JoinHow = Literal["inner", "left", "right", "outer", "semi", "anti"]
FileFormat = Literal["parquet", "csv", "json"]

_serial = itertools.count()


class PlanNode:
    """Base of all plan nodes. Subclasses are frozen dataclasses."""

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return ()

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = self.__dict__["_schema"]
        return schema

    def _set_schema(self, schema: pa.Schema) -> None:
        names = schema.names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PlanError(
                f"step `{self.describe()}` produces column(s) {duplicates} more than once; "
                "give each output column a unique name (for example with AS)"
            )
        object.__setattr__(self, "_schema", schema)

    def describe(self) -> str:
        """One line: the step's kind and its key fields."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# Sources


class Source(PlanNode):
    """A node that produces data; it has no plan inputs."""

    def to_duckdb(self, cursor: Cursor) -> Relation:
        raise NotImplementedError

    def _derive_schema(self) -> None:
        cursor = _engine.cursor()
        try:
            relation = self.to_duckdb(cursor)
            self._set_schema(relation.limit(0).to_arrow_table().schema)
        except duckdb.Error as exc:
            raise SourceError(f"cannot read `{self.describe()}`: {duckdb_message(exc)}") from exc
        finally:
            cursor.close()


@dataclass(frozen=True, eq=False)
class FileScan(Source):
    """Files of one format, already resolved to a list of paths by the io layer."""

    format: FileFormat
    files: tuple[str, ...]
    label: str
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        if not self.files:
            raise SourceError(f"no {self.format} files to read for {self.label!r}")
        object.__setattr__(self, "_restore", self._fixed_size_columns())
        self._derive_schema()

    def _fixed_size_columns(self) -> tuple[tuple[str, str], ...]:
        """Parquet has no fixed-size list, so ``FLOAT[384]`` is stored as a list; the Arrow
        schema that pyarrow writes beside it says what it was, and reading casts it back."""
        if self.format != "parquet" or "://" in self.files[0]:
            return ()
        import pyarrow.parquet as pq

        from vane.types import arrow_to_duckdb

        try:
            stored = pq.read_schema(self.files[0])
        except (OSError, pa.ArrowException):
            return ()  # not readable by pyarrow: DuckDB reports the problem when it reads it
        return tuple(
            (f.name, arrow_to_duckdb(f.type)) for f in stored if pa.types.is_fixed_size_list(f.type)
        )

    def to_duckdb(self, cursor: Cursor) -> Relation:
        # DuckDB's stubs type each option separately; these were checked when the scan was built.
        files: Any = list(self.files)
        options: dict[str, Any] = dict(self.options)
        if self.format == "parquet":
            relation = cursor.read_parquet(files, **options)
            restore: tuple[tuple[str, str], ...] = self.__dict__["_restore"]
            if restore:
                casts = ", ".join(f"{quote_ident(n)}::{t} AS {quote_ident(n)}" for n, t in restore)
                relation = relation.project(f"* REPLACE ({casts})")
            return relation
        if self.format == "csv":
            return cursor.read_csv(files, **options)
        return cursor.read_json(files, format="newline_delimited", **options)

    def describe(self) -> str:
        count = len(self.files)
        return f"Read{self.format.capitalize()} {self.label} ({count} file{'s' * (count != 1)})"


@dataclass(frozen=True, eq=False)
class ArrowScan(Source):
    """An in-memory Arrow table; it can be read any number of times."""

    table: pa.Table

    def __post_init__(self) -> None:
        self._set_schema(self.table.schema)

    def to_duckdb(self, cursor: Cursor) -> Relation:
        return cursor.from_arrow(self.table)

    def describe(self) -> str:
        return f"FromArrow rows={self.table.num_rows}"


@dataclass(frozen=True, eq=False)
class ArrowStreamScan(Source):
    """A ``RecordBatchReader``: streamed lazily, so it can be read by one action only."""

    reader: pa.RecordBatchReader
    _state: dict[str, bool] = field(default_factory=lambda: {"consumed": False}, repr=False)

    def __post_init__(self) -> None:
        self._set_schema(self.reader.schema)

    def to_duckdb(self, cursor: Cursor) -> Relation:
        if self._state["consumed"]:
            raise SourceError(
                "this relation reads a pyarrow RecordBatchReader, which can be read once, and an "
                "earlier action already read it. Pass a pa.Table to vane.from_arrow to read the "
                "data several times, or build the relation again from a new reader"
            )
        self._state["consumed"] = True
        return cursor.from_arrow(self.reader)

    def describe(self) -> str:
        return "FromArrowStream (readable once)"


@dataclass(frozen=True, eq=False)
class RangeScan(Source):
    """``BIGINT`` ids ``0 .. n-1`` in a column ``id``."""

    n: int

    def __post_init__(self) -> None:
        self._set_schema(pa.schema([pa.field("id", pa.int64())]))

    def to_duckdb(self, cursor: Cursor) -> Relation:
        return cursor.sql(f"SELECT range AS id FROM range({int(self.n)})")

    def describe(self) -> str:
        return f"Range n={self.n}"


# --------------------------------------------------------------------------------------------
# SQL steps


class SqlStep(PlanNode):
    """A node whose output DuckDB computes from its inputs' relations."""

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        raise NotImplementedError

    def _derive_schema(self) -> None:
        """Bind the step against empty tables of its inputs' schemas: no data is read."""
        with _engine.scratch() as cursor:
            try:
                empties = [cursor.from_arrow(node.schema.empty_table()) for node in self.inputs]
                schema = self.apply(cursor, *empties).limit(0).to_arrow_table().schema
            except duckdb.Error as exc:
                raise PlanError(
                    f"step `{self.describe()}` does not fit its input: {duckdb_message(exc)}. "
                    f"Input columns: {', '.join(self._input_columns())}"
                ) from exc
        self._set_schema(schema)

    def _input_columns(self) -> list[str]:
        return [name for node in self.inputs for name in node.schema.names]


def _need_texts(step: str, what: str, values: Sequence[object]) -> tuple[str, ...]:
    if not values:
        raise PlanError(f"{step}() needs at least one {what}")
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise PlanError(f"{step}(): each {what} must be a non-empty SQL string, got {value!r}")
    return tuple(str(v) for v in values)


@dataclass(frozen=True, eq=False)
class Select(SqlStep):
    input: PlanNode
    exprs: tuple[str, ...]

    def __post_init__(self) -> None:
        _need_texts("select", "expression", self.exprs)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].project(sql_list(self.exprs))

    def describe(self) -> str:
        return f"Select {sql_list(self.exprs)}"


@dataclass(frozen=True, eq=False)
class Filter(SqlStep):
    input: PlanNode
    predicate: str

    def __post_init__(self) -> None:
        _need_texts("filter", "predicate", [self.predicate])
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].filter(self.predicate)

    def describe(self) -> str:
        return f"Filter {self.predicate}"


@dataclass(frozen=True, eq=False)
class WithColumn(SqlStep):
    """Add a column, or replace one of the same name in place."""

    input: PlanNode
    name: str
    expr: str

    def __post_init__(self) -> None:
        _need_texts("with_column", "name and expression", [self.name, self.expr])
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        alias = f"({self.expr}) AS {quote_ident(self.name)}"
        if self.name in self.input.schema.names:
            return inputs[0].project(f"* REPLACE ({alias})")
        return inputs[0].project(f"*, {alias}")

    def describe(self) -> str:
        return f"WithColumn {self.name} = {self.expr}"


def _check_columns(step: str, names: Sequence[str], node: PlanNode) -> None:
    missing = [n for n in names if n not in node.schema.names]
    if missing:
        raise PlanError(
            f"{step}(): no column named {', '.join(map(repr, missing))}; "
            f"the input has {', '.join(node.schema.names)}"
        )


@dataclass(frozen=True, eq=False)
class Drop(SqlStep):
    input: PlanNode
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _need_texts("drop", "column name", self.names)
        _check_columns("drop", self.names, self.input)
        if len(set(self.names)) == len(self.input.schema):
            raise PlanError("drop(): this would drop every column; a relation needs at least one")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].project(f"* EXCLUDE ({sql_list([quote_ident(n) for n in self.names])})")

    def describe(self) -> str:
        return f"Drop {sql_list(self.names)}"


@dataclass(frozen=True, eq=False)
class Rename(SqlStep):
    input: PlanNode
    mapping: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.mapping:
            raise PlanError("rename() needs a mapping such as {'old': 'new'}")
        for old, new in self.mapping:
            if not isinstance(new, str) or not new:
                raise PlanError(f"rename(): the new name for {old!r} must be a non-empty string")
        _check_columns("rename", [old for old, _ in self.mapping], self.input)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        renames = dict(self.mapping)
        exprs = [
            f"{quote_ident(n)} AS {quote_ident(renames[n])}" if n in renames else quote_ident(n)
            for n in self.input.schema.names
        ]
        return inputs[0].project(sql_list(exprs))

    def describe(self) -> str:
        return "Rename " + ", ".join(f"{old} -> {new}" for old, new in self.mapping)


@dataclass(frozen=True, eq=False)
class Limit(SqlStep):
    input: PlanNode
    n: int
    offset: int = 0

    def __post_init__(self) -> None:
        for label, value in (("n", self.n), ("offset", self.offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(f"limit(): {label} must be an integer >= 0, got {value!r}")
        self._set_schema(self.input.schema)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].limit(self.n, self.offset)

    def describe(self) -> str:
        return f"Limit {self.n}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True, eq=False)
class OrderBy(SqlStep):
    input: PlanNode
    exprs: tuple[str, ...]

    def __post_init__(self) -> None:
        _need_texts("order_by", "expression", self.exprs)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].order(sql_list(self.exprs))

    def describe(self) -> str:
        return f"OrderBy {sql_list(self.exprs)}"


@dataclass(frozen=True, eq=False)
class Aggregate(SqlStep):
    """Group keys first, then the aggregates, as ``SELECT keys, aggs ... GROUP BY keys``."""

    input: PlanNode
    aggs: tuple[str, ...]
    group_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _need_texts("aggregate", "aggregate expression", self.aggs)
        if self.group_by:
            _need_texts("aggregate", "group_by expression", self.group_by)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].aggregate(sql_list(self.group_by + self.aggs), sql_list(self.group_by))

    def describe(self) -> str:
        keys = f" by {sql_list(self.group_by)}" if self.group_by else ""
        return f"Aggregate {sql_list(self.aggs)}{keys}"


@dataclass(frozen=True, eq=False)
class Distinct(SqlStep):
    input: PlanNode

    def __post_init__(self) -> None:
        self._set_schema(self.input.schema)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        return inputs[0].distinct()

    def describe(self) -> str:
        return "Distinct"


@dataclass(frozen=True, eq=False)
class Union(SqlStep):
    """All rows of both inputs (UNION ALL), columns matched by name, never by position."""

    left: PlanNode
    right: PlanNode

    def __post_init__(self) -> None:
        left, right = set(self.left.schema.names), set(self.right.schema.names)
        if left != right:
            raise PlanError(
                "union(): the inputs have different columns. Only on the left: "
                f"{sorted(left - right)}; only on the right: {sorted(right - left)}. "
                "Select or rename columns so both sides have the same names"
            )
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        # Columns are matched by name: the right side is projected into the left's order.
        ordered = inputs[1].project(sql_list([quote_ident(n) for n in self.left.schema.names]))
        return inputs[0].union(ordered)

    def describe(self) -> str:
        return "Union"


@dataclass(frozen=True, eq=False)
class Join(SqlStep):
    """``on`` names key columns present on both sides (kept once); ``left_on``/``right_on`` pair
    key expressions. Other columns that exist on both sides get ``_right`` on the right's copy."""

    left: PlanNode
    right: PlanNode
    how: JoinHow
    on: tuple[str, ...] = ()
    left_on: tuple[str, ...] = ()
    right_on: tuple[str, ...] = ()

    HOWS: ClassVar[tuple[str, ...]] = ("inner", "left", "right", "outer", "semi", "anti")

    def __post_init__(self) -> None:
        if self.how not in self.HOWS:
            raise PlanError(f"join(): how={self.how!r} is not one of {', '.join(self.HOWS)}")
        if bool(self.on) == bool(self.left_on or self.right_on):
            raise PlanError(
                "join() needs either on='key' (or a list of keys present on both sides), or "
                "left_on= and right_on= with one expression each per key"
            )
        if self.on:
            _check_columns("join (left side)", self.on, self.left)
            _check_columns("join (right side)", self.on, self.right)
        elif len(self.left_on) != len(self.right_on):
            raise PlanError(
                f"join(): left_on has {len(self.left_on)} keys and right_on has "
                f"{len(self.right_on)}; give one right key per left key"
            )
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        left, right = inputs[0].set_alias("l"), inputs[1].set_alias("r")
        if self.on:
            condition = " AND ".join(f"l.{quote_ident(k)} = r.{quote_ident(k)}" for k in self.on)
        else:
            condition = " AND ".join(
                f"({lk}) = ({rk})" for lk, rk in zip(self.left_on, self.right_on, strict=True)
            )
        joined = left.join(right, condition, how=self.how)
        if self.how in ("semi", "anti"):
            return joined
        left_names = self.left.schema.names
        exprs = []
        for name in left_names:
            if name in self.on and self.how in ("right", "outer"):
                exprs.append(
                    f"coalesce(l.{quote_ident(name)}, r.{quote_ident(name)}) AS {quote_ident(name)}"
                )
            else:
                exprs.append(f"l.{quote_ident(name)}")
        for name in self.right.schema.names:
            if name in self.on:
                continue
            alias = f"{name}_right" if name in left_names else name
            exprs.append(f"r.{quote_ident(name)} AS {quote_ident(alias)}")
        return joined.project(sql_list(exprs))

    def describe(self) -> str:
        if self.on:
            keys = sql_list(self.on)
        else:
            keys = " AND ".join(
                f"{lk} = {rk}" for lk, rk in zip(self.left_on, self.right_on, strict=True)
            )
        return f"Join {self.how} on {keys}"


_WITH = re.compile(r"^\s*WITH\s+(RECURSIVE\s+)?", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class SqlQuery(SqlStep):
    """A user's DuckDB SQL over named inputs (none: a source such as ``vane.sql("SELECT 1")``)."""

    query: str
    named_inputs: tuple[tuple[str, PlanNode], ...] = ()

    def __post_init__(self) -> None:
        _need_texts("sql", "query", [self.query])
        names = [name for name, _ in self.named_inputs]
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise PlanError(f"sql(): table name {name!r} must be a plain identifier")
        if len(set(names)) != len(names):
            raise PlanError(f"sql(): table names must be unique, got {names}")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return tuple(node for _, node in self.named_inputs)

    def apply(self, cursor: Cursor, *inputs: Relation) -> Relation:
        if not inputs:
            return cursor.sql(self.query)
        # Each input is registered on this cursor under a name no other step uses, then exposed
        # to the query under the user's name as a CTE, which shadows any table of that name.
        ctes = []
        for (name, _), relation in zip(self.named_inputs, inputs, strict=True):
            internal = f"_vane_{next(_serial)}_{name}"
            cursor.register(internal, relation)
            ctes.append(f"{quote_ident(name)} AS (FROM {internal})")
        match = _WITH.match(self.query)
        if match:
            head = "WITH " + (match.group(1) or "")
            return cursor.sql(head + sql_list(ctes) + ", " + self.query[match.end() :])
        return cursor.sql("WITH " + sql_list(ctes) + " " + self.query)

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.named_inputs)
        query = " ".join(self.query.split())
        return f"Sql [{names}] {query}" if names else f"Sql {query}"


# --------------------------------------------------------------------------------------------
# UDF steps


_VERB_KIND = {"map_batches": "MapBatches", "map": "Map", "flat_map": "FlatMap"}


@dataclass(frozen=True, eq=False)
class UdfStep(PlanNode):
    """A user's function or class run over batches of its input by an actor pool. Its output is
    the declared schema (plus an ``error`` column with ``on_error="null"``)."""

    input: PlanNode
    udf: UdfSpec
    declared: pa.Schema

    def __post_init__(self) -> None:
        spec = self.udf
        names = self.input.schema.names
        if spec.reads is not None:
            _check_columns(spec.verb, spec.reads, self.input)
        produced = output_schema(spec, self.declared)
        if spec.passthrough:
            clash = [n for n in produced.names if n in names]
            if clash:
                raise PlanError(
                    f"{spec.verb}(): output column(s) {clash} would shadow input columns of the "
                    "same name; choose other output names, or drop those input columns first"
                )
            produced = pa.schema(list(self.input.schema) + list(produced))
        self._set_schema(produced)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def describe(self) -> str:
        spec = self.udf
        concurrency = (
            str(spec.min_actors)
            if spec.min_actors == spec.max_actors
            else f"({spec.min_actors}, {spec.max_actors})"
        )
        fields = [
            f"backend={spec.backend}",
            f"batch_size={spec.batch_size or 'default'}",
            f"concurrency={concurrency}",
        ]
        if spec.gpus:
            fields.append(f"gpus={spec.gpus:g}")
        if spec.cpus:
            fields.append(f"cpus={spec.cpus:g}")
        if spec.memory:
            fields.append(f"memory={spec.memory}")
        if spec.is_async:
            fields.append(f"async max_concurrency_per_actor={spec.max_concurrency_per_actor}")
        if spec.max_retries:
            fields.append(f"max_retries={spec.max_retries}")
        if spec.on_error != "raise":
            fields.append(f"on_error={spec.on_error}")
        if not spec.preserve_order:
            fields.append("preserve_order=False")
        if spec.reads is not None:
            fields.append(f"reads=[{', '.join(spec.reads)}]")
        columns = ", ".join(self.declared.names)
        keeps = "input + " if spec.passthrough else ""
        return f"{_VERB_KIND.get(spec.verb, 'Udf')} {spec.name} -> {keeps}[{columns}] " + " ".join(
            fields
        )
