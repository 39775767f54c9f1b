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
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import duckdb
import pyarrow as pa

from vane import _engine
from vane._sql import duckdb_message, quote_ident, sql_list
from vane.errors import PlanError, SchemaError, SourceError
from vane.io import readers
from vane.io.combine import check_files
from vane.io.files import FileFormat
from vane.io.spool import Spool
from vane.plan.expr import Alias, Column, Expr, SqlText, display
from vane.plan.parse import check_query, code_tokens
from vane.plan.sql import select_item, to_sql
from vane.udf.spec import UdfSpec, output_schema

Relation = duckdb.DuckDBPyRelation
Cursor = duckdb.DuckDBPyConnection
JoinHow = Literal["inner", "left", "right", "outer", "semi", "anti"]

_serial = itertools.count()
_step_ids = itertools.count(1)


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
    """Files of one format, already resolved to a list of paths by the io layer; ``options``
    are DuckDB's reader parameters (``io/readers.py``), ``columns`` the ones to keep, ``stamps``
    each file's identity when it was listed (taken here unless given).

    An action reads the files it was built on or fails: a file gone or replaced since (by
    another write, an overwrite of the same name included) is a ``SourceError`` saying so,
    never rows of another file read under this schema."""

    format: FileFormat
    files: tuple[str, ...]
    label: str
    options: tuple[tuple[str, object], ...] = ()
    columns: tuple[str, ...] | None = None
    stamps: Mapping[str, readers.Stamp] | None = None
    # Remote files (URLs): their store's options (io/storage.py); None for local files.
    storage: readers.Storage = None

    def __post_init__(self) -> None:
        if not self.files:
            raise SourceError(f"no {self.format} files to read for {self.label!r}")
        if self.stamps is None:
            # Before anything is read: a file replaced from here on differs from its stamp.
            object.__setattr__(self, "stamps", readers.stamps(self.files, self.storage))
        options = dict(self.options)
        restore: dict[str, pa.DataType] = {}
        differing = None  # Parquet files' stored schemas, where they differ
        rows = None  # the files' rows, where their footers say
        if self.format == "parquet":
            footers = (
                readers.parquet_footers(self.files)
                if self.storage is None
                else readers.parquet_footers(self.files, self.storage)
            )
            if footers is not None:
                schemas = [footer.schema for footer in footers]
                rows = sum(footer.rows for footer in footers)
                readers.check_names(self.files, schemas)
                restore = readers.fixed_size_columns(schemas)
                if any(not s.equals(schemas[0], check_metadata=False) for s in schemas[1:]):
                    options.setdefault("union_by_name", True)
                    differing = schemas
        elif len(self.files) > 1:
            options.setdefault("union_by_name", True)  # files are combined by column name
        object.__setattr__(self, "_restore", restore)
        object.__setattr__(self, "_rows", rows)
        typed = readers.typed_columns(self.format, options)
        cursor = _engine.cursor()
        try:
            records = None
            if self.format == "json":
                sizes = [(self.stamps or {}).get(f, (0, 0, 1, 0))[2] for f in self.files]
                options, records = readers.complete_json_options(
                    cursor, self._paths(), options, sizes if self.storage is not None else None
                )
            object.__setattr__(self, "options", tuple(sorted(options.items())))
            object.__setattr__(self, "_records", records)
            self._derive_schema_on(cursor)
            if len(self.files) > 1:
                combined: pa.Schema = self.__dict__["_combined"]
                skip = typed | (set(combined.names) - set(self.columns or combined.names))
                check_files(
                    cursor,
                    self.format,
                    self._paths(),
                    options,
                    label=self.label,
                    combined=combined,
                    schemas=differing,
                    skip=skip,
                )
        except duckdb.Error as exc:
            raise self.vanished() or SourceError(
                f"cannot read `{self.describe()}`: {duckdb_message(exc)}"
            ) from exc
        finally:
            cursor.close()
        self._check_ragged_csv()
        changed = self.vanished()  # replaced while it was being read: say so now
        if changed is not None:
            raise changed

    @property
    def rows(self) -> int | None:
        """The rows the files hold, when that is known without reading them (Parquet footers;
        a file replaced since fails the action that reads it, so the count holds)."""
        rows: int | None = self.__dict__["_rows"]
        return rows

    def _paths(self) -> list[str]:
        """The files as DuckDB opens them (a URL through vane's storage layer)."""
        return readers.duckdb_files(self.files, self.storage)

    def _scan(self, cursor: Cursor) -> Relation:
        """The files as DuckDB reads them together, before vane's casts and projection."""
        records: readers.JsonLines | None = self.__dict__["_records"]
        sql = readers.scan_sql(self.format, self._paths(), dict(self.options), records)
        return cursor.sql(sql)

    def _shape(self, relation: Relation) -> Relation:
        restore: dict[str, pa.DataType] = self.__dict__["_restore"]
        present = {n: t for n, t in restore.items() if n in relation.columns}
        if present:
            from vane.types import arrow_to_duckdb

            casts = sql_list(
                f"{quote_ident(n)}::{arrow_to_duckdb(t)} AS {quote_ident(n)}"
                for n, t in present.items()
            )
            relation = relation.project(f"* REPLACE ({casts})")
        if self.columns is not None:
            relation = relation.project(
                readers.projection(self.columns, relation.columns, self.label)
            )
        return relation

    def to_duckdb(self, cursor: Cursor) -> Relation:
        changed = self.vanished()
        if changed is not None:
            raise changed
        relation = self._scan(cursor)
        bound = (relation.columns, [str(t) for t in relation.types])
        if bound != self.__dict__["_bound"]:  # the stamps missed a change: the schema did not
            raise self._changed(
                f"its columns were {_columns(*self.__dict__['_bound'])}, and now they are "
                f"{_columns(*bound)}"
            )
        return self._shape(relation)

    def _derive_schema_on(self, cursor: Cursor) -> None:
        relation = self._scan(cursor)
        object.__setattr__(self, "_bound", (relation.columns, [str(t) for t in relation.types]))
        if len(self.files) > 1:  # the types the files are combined into, before vane's casts
            object.__setattr__(self, "_combined", relation.limit(0).to_arrow_table().schema)
        self._set_schema(self._shape(relation).limit(0).to_arrow_table().schema)

    def _check_ragged_csv(self) -> None:
        """DuckDB reads a CSV whose rows have different numbers of fields as one text column
        named by the whole header: say so, with the fixes, instead of returning that."""
        names = self.schema.names
        given = dict(self.options)
        if self.format != "csv" or len(names) != 1 or "delim" in given or "null_padding" in given:
            return
        separators = [c for c in ",;\t|" if c in names[0]]
        if separators:
            raise SourceError(
                f"`{self.describe()}`: the header {names[0]!r} looks like several columns, but "
                "DuckDB could not find one delimiter that fits every row (rows with different "
                "numbers of fields?). Pass null_padding=True to read missing fields as nulls, "
                f"or delimiter={separators[0]!r} to say what separates the fields"
            )

    def describe(self) -> str:
        count = len(self.files)
        return f"Read{self.format.capitalize()} {self.label} ({count} file{'s' * (count != 1)})"

    def vanished(self) -> SourceError | None:
        """If files listed when the relation was built are gone or were replaced since
        (another write), the error that says so; None if they are all as they were."""
        stamps = self.stamps or {}
        gone: list[str] = []
        replaced: list[str] = []
        current = readers.stamps(self.files, self.storage) if self.storage is not None else None
        for path in self.files:
            try:
                now = current[path] if current is not None else readers.stamp(os.stat(path))
            except (OSError, KeyError):
                gone.append(path)
                continue
            if stamps.get(path, now) != now:
                replaced.append(path)
        if gone:
            return self._changed(
                f"{gone[0]!r}"
                + (f" and {len(gone) - 1} other file(s)" if len(gone) > 1 else "")
                + " no longer exist(s)"
            )
        if replaced:
            return self._changed(
                f"{replaced[0]!r}"
                + (f" and {len(replaced) - 1} other file(s)" if len(replaced) > 1 else "")
                + " changed since the relation was built"
            )
        return None

    def _changed(self, what: str) -> SourceError:
        return SourceError(
            f"`{self.describe()}`: {what}: the files changed since they were listed (another "
            f"write replaced them?). Build the relation again, e.g. "
            f"vane.read_{self.format}({self.label!r}), to read what is there now"
        )


def _columns(names: Sequence[str], types: Sequence[str]) -> str:
    return ", ".join(f"{n} {t}" for n, t in zip(names, types, strict=True))


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
class MaterializedScan(Source):
    """A result computed once and kept (``Relation.materialize()``): read any number of times."""

    spool: Spool

    def __post_init__(self) -> None:
        self._set_schema(self.spool.schema)

    def to_duckdb(self, cursor: Cursor) -> Relation:
        return cursor.from_arrow(self.spool.reader())

    def describe(self) -> str:
        return f"Materialized ({self.spool.describe()})"


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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        """The step on DuckDB relations of its inputs. ``probe=True`` only binds it to learn
        the schema: UDF calls still in its expressions stand as typed NULLs."""
        raise NotImplementedError

    def expressions(self) -> tuple[Expr, ...]:
        """The expressions the step evaluates on its input's rows (for the optimizer)."""
        return ()

    def _derive_schema(self) -> None:
        """Bind the step against empty tables of its inputs' schemas: no data is read."""
        with _engine.scratch() as cursor:
            try:
                empties = [cursor.from_arrow(node.schema.empty_table()) for node in self.inputs]
                self._check_udf_arguments(empties)
                relation = self.apply(cursor, *empties, probe=True)
                schema = relation.limit(0).to_arrow_table().schema
            except duckdb.Error as exc:
                fits = "does not fit its input" if self.inputs else "does not bind"
                raise PlanError(
                    f"step `{self.describe()}` {fits}: {duckdb_message(exc)}{self._columns_note()}"
                ) from exc
            finally:
                self._release(cursor)
        self._set_schema(schema)

    def _check_udf_arguments(self, empties: list[Relation]) -> None:
        """Bind each UDF call's arguments on their own first: a bad column then gets DuckDB's
        plain "not found" rather than a message about the call's output name."""
        for call in (c for e in self.expressions() for c in e.udf_calls()):
            try:
                empties[0].project(sql_list(to_sql(a, probe=True) for a in call.args)).limit(0)
            except duckdb.Error as exc:
                raise PlanError(
                    f"step `{self.describe()}`: the arguments of {call.udf.name} do not fit the "
                    f"input: {duckdb_message(exc)}{self._columns_note()}"
                ) from exc

    def _release(self, cursor: Cursor) -> None:
        """Drop whatever binding registered on the shared scratch cursor."""

    def _input_columns(self) -> list[str]:
        return [name for node in self.inputs for name in node.schema.names]

    def _columns_note(self) -> str:
        """ ". Input columns: a, b" for a message, or nothing for a step with no input (a query
        that reads files), which has no columns to list."""
        columns = self._input_columns()
        return f". Input columns: {', '.join(columns)}" if columns else ""


class _RowLocalStep(SqlStep):
    """A SQL step computed row by row: row-local unless an expression aggregates, uses a
    window or a subquery."""

    @property
    def row_local(self) -> bool:
        return all(expr.is_row_local() for expr in self.expressions())


def _need(step: str, what: str, values: Sequence[object]) -> None:
    if not values:
        raise PlanError(f"{step}() needs at least one {what}")


def _no_udf_calls(step: str, exprs: Sequence[Expr]) -> None:
    for expr in exprs:
        calls = expr.udf_calls()
        if calls:
            raise PlanError(
                f"{step}(): {calls[0].udf.name} is a UDF, and UDFs cannot run inside {step}: "
                "compute the column first with with_column(), then use it here"
            )


def _show_item(expr: Expr) -> str:
    """A select-list item as explain() shows it."""
    if isinstance(expr, (Column, Alias, SqlText)):
        return display(expr)
    return f"{display(expr)} AS {display(Column(expr.output_name))}"


@dataclass(frozen=True, eq=False)
class Select(_RowLocalStep):
    input: PlanNode
    exprs: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _need("select", "expression", self.exprs)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return self.exprs

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].project(sql_list(select_item(e, probe=probe) for e in self.exprs))

    def describe(self) -> str:
        return f"Select {sql_list(_show_item(e) for e in self.exprs)}"


@dataclass(frozen=True, eq=False)
class Filter(_RowLocalStep):
    input: PlanNode
    predicate: Expr

    def __post_init__(self) -> None:
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return (self.predicate,)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].filter(to_sql(self.predicate, probe=probe))

    def describe(self) -> str:
        return f"Filter {display(self.predicate)}"


@dataclass(frozen=True, eq=False)
class WithColumns(_RowLocalStep):
    """Add columns computed from the input (all from the input as it was), or replace the
    columns of those names in place."""

    input: PlanNode
    items: tuple[tuple[str, Expr], ...]

    def __post_init__(self) -> None:
        _need("with_column", "column", self.items)
        names = [name for name, _ in self.items]
        for name in names:
            if not isinstance(name, str) or not name:
                raise PlanError(
                    f"with_column(): a column name must be a non-empty string, got {name!r}"
                )
        if len({n.lower() for n in names}) != len(names):
            raise PlanError(f"with_columns(): column names must be unique, got {names}")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return tuple(expr for _, expr in self.items)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        existing = {n.lower(): n for n in self.input.schema.names}
        replaced: list[str] = []
        added: list[str] = []
        for name, expr in self.items:
            target = existing.get(name.lower())
            item = f"{to_sql(expr, probe=probe)} AS {quote_ident(target or name)}"
            (replaced if target else added).append(item)
        star = f"* REPLACE ({sql_list(replaced)})" if replaced else "*"
        return inputs[0].project(sql_list([star, *added]))

    def describe(self) -> str:
        return "WithColumn " + sql_list(
            f"{display(Column(n))} = {display(e)}" for n, e in self.items
        )


def _check_columns(step: str, names: Sequence[str], node: PlanNode) -> None:
    missing = [n for n in names if n not in node.schema.names]
    if missing:
        raise PlanError(
            f"{step}(): no column named {', '.join(map(repr, missing))}; "
            f"the input has {', '.join(node.schema.names)}"
        )


@dataclass(frozen=True, eq=False)
class Drop(_RowLocalStep):
    input: PlanNode
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _need("drop", "column name", self.names)
        _check_columns("drop", self.names, self.input)
        if len(set(self.names)) == len(self.input.schema):
            raise PlanError("drop(): this would drop every column; a relation needs at least one")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].project(f"* EXCLUDE ({sql_list([quote_ident(n) for n in self.names])})")

    def describe(self) -> str:
        return f"Drop {sql_list(self.names)}"


@dataclass(frozen=True, eq=False)
class Rename(_RowLocalStep):
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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].limit(self.n, self.offset)

    def describe(self) -> str:
        return f"Limit {self.n}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True)
class SortKey:
    expr: Expr
    descending: bool = False
    nulls_first: bool | None = None  # None: DuckDB's default (nulls last)

    def sql(self, *, probe: bool = False) -> str:
        text = to_sql(self.expr, probe=probe) + (" DESC" if self.descending else " ASC")
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text

    def describe(self) -> str:
        text = display(self.expr) + (" DESC" if self.descending else "")
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text


@dataclass(frozen=True, eq=False)
class OrderBy(SqlStep):
    input: PlanNode
    keys: tuple[SortKey, ...]

    def __post_init__(self) -> None:
        _need("order_by", "sort key", self.keys)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return tuple(key.expr for key in self.keys)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].order(sql_list(k.sql(probe=probe) for k in self.keys))

    def describe(self) -> str:
        return f"OrderBy {sql_list(k.describe() for k in self.keys)}"


def group_key_name(expr: Expr) -> str:
    """A group key's column: its alias, or the column it is, or for an expression the text as
    written (``hour(ts)``), not DuckDB's rendering of it."""
    if isinstance(expr, SqlText):
        return expr.parsed.alias or " ".join(expr.parsed.text.split())
    return expr.output_name


@dataclass(frozen=True, eq=False)
class Aggregate(SqlStep):
    input: PlanNode
    aggs: tuple[Expr, ...]
    group_by: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        _need("aggregate", "aggregate expression", self.aggs)
        _no_udf_calls("aggregate", self.aggs + self.group_by)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return self.aggs + self.group_by

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        keys = [to_sql(k) for k in self.group_by]
        named = [
            f"{k} AS {quote_ident(group_key_name(e))}"
            for k, e in zip(keys, self.group_by, strict=True)
        ]
        return inputs[0].aggregate(
            sql_list(named + [select_item(a) for a in self.aggs]), sql_list(keys)
        )

    def describe(self) -> str:
        keys = f" by {sql_list(_show_key(k) for k in self.group_by)}" if self.group_by else ""
        return f"Aggregate {sql_list(_show_item(a) for a in self.aggs)}{keys}"


def _show_key(expr: Expr) -> str:
    return display(expr) if isinstance(expr, (Column, SqlText, Alias)) else _show_item(expr)


@dataclass(frozen=True, eq=False)
class Distinct(SqlStep):
    input: PlanNode

    def __post_init__(self) -> None:
        self._set_schema(self.input.schema)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
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


@dataclass(frozen=True, eq=False)
class SqlQuery(SqlStep):
    """A user's DuckDB SQL over named inputs (none: a source such as ``vane.sql("SELECT 1")``).
    It must be one query statement: building a plan never changes the database."""

    query: str
    named_inputs: tuple[tuple[str, PlanNode], ...] = ()
    # The text DuckDB runs when attached UDF calls were lifted out of ``query``
    # (``plan/sql_calls.py``), and the hidden columns that hold their results.
    lowered: str | None = None
    hidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise PlanError(f"sql() needs a query, got {self.query!r}")
        check_query(self.query, "sql()")
        names = [name for name, _ in self.named_inputs]
        for name in names:
            if not name.isidentifier():
                raise PlanError(f"sql(): table name {name!r} must be a plain identifier")
        if len({n.lower() for n in names}) != len(names):
            raise PlanError(f"sql(): table names must be unique, got {names}")
        object.__setattr__(self, "_probe_views", [])
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return tuple(node for _, node in self.named_inputs)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        query = self.lowered or self.query
        if not inputs:
            return cursor.sql(query)
        # Each input is registered on this cursor under a name no other step uses, then exposed
        # to the query under the user's name as a CTE, which shadows any table of that name.
        ctes = []
        for (name, _), relation in zip(self.named_inputs, inputs, strict=True):
            internal = f"_vane_{next(_serial)}_{name}"
            cursor.register(internal, relation)
            if probe:
                self.__dict__["_probe_views"].append(internal)
            ctes.append(f"{quote_ident(name)} AS (FROM {internal})")
        relation = cursor.sql(_with_ctes(query, ctes))
        shown = [c for c in relation.columns if c in self.hidden]  # reached through `*`
        if shown:
            relation = relation.project(f"* EXCLUDE ({sql_list(quote_ident(c) for c in shown)})")
        return relation

    def _release(self, cursor: Cursor) -> None:
        views: list[str] = self.__dict__["_probe_views"]
        while views:
            cursor.unregister(views.pop())

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.named_inputs)
        query = " ".join(self.query.split())
        return f"Sql [{names}] {query}" if names else f"Sql {query}"


def _with_ctes(query: str, ctes: list[str]) -> str:
    """``query`` with ``ctes`` defined first: merged into its own WITH clause if it has one
    (found with DuckDB's tokenizer, so comments and letter case are no trouble)."""
    words = code_tokens(query)[:2]
    if words and words[0].word == "WITH":
        keyword = words[1] if len(words) > 1 and words[1].word == "RECURSIVE" else words[0]
        end = keyword.start + len(keyword.word)
        return f"{query[:end]} {sql_list(ctes)}, {query[end:]}"
    return f"WITH {sql_list(ctes)} {query}"


# --------------------------------------------------------------------------------------------
# UDF steps


_VERB_KIND = {"map_batches": "MapBatches", "map": "Map", "flat_map": "FlatMap", "udf": "Udf"}


class InferredSchema:
    """A UDF step's output schema when the user gave none: learned from the step's first output
    batch by ``probe`` (which runs it), the first time the plan needs it, and kept."""

    def __init__(self, probe: Callable[[], pa.Schema]) -> None:
        self._probe = probe
        self._schema: pa.Schema | None = None

    @property
    def known(self) -> bool:
        return self._schema is not None

    def resolve(self) -> pa.Schema:
        if self._schema is None:
            self._schema = self._probe()
        return self._schema


@dataclass(frozen=True, eq=False)
class UdfStep(PlanNode):
    """A user's function or class run over batches of its input by an actor pool. Its output is
    the declared schema (plus an ``error`` column with ``on_error="null"``); without one, the
    schema of its first output batch, learned when the plan first needs it.

    ``step_id`` is the step's identity, given when it is built and kept when the optimizer
    rebuilds it over other inputs: two steps of one function share a name, never an id, and
    events, summaries and ``explain(analyze=True)`` tell them apart by it."""

    input: PlanNode
    udf: UdfSpec
    declared: pa.Schema | InferredSchema
    step_id: int = field(default_factory=lambda: next(_step_ids))

    def __post_init__(self) -> None:
        spec = self.udf
        if spec.reads is not None:
            _check_columns(spec.verb, spec.reads, self.input)
        if isinstance(self.declared, pa.Schema):
            self._derive()

    @property
    def schema(self) -> pa.Schema:
        if "_schema" not in self.__dict__:
            self._derive()  # runs the first batch, once
        return super().schema

    @property
    def declared_schema(self) -> pa.Schema:
        """The columns the function returns, as declared or as learned from its output."""
        declared = self.declared
        return declared.resolve() if isinstance(declared, InferredSchema) else declared

    def _derive(self) -> None:
        spec = self.udf
        names = self.input.schema.names
        produced = output_schema(spec, self.declared_schema)
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

    @property
    def row_local(self) -> bool:
        return True  # each batch is answered on its own

    def describe(self) -> str:
        spec = self.udf
        fields = execution_fields(
            backend=spec.backend,
            batch_size=spec.batch_size,
            actors=(spec.min_actors, spec.max_actors),
            gpus=spec.gpus,
            cpus=spec.cpus,
            memory=spec.memory,
            is_async=spec.is_async,
            async_limit=f"max_concurrency_per_actor={spec.max_concurrency_per_actor}",
            max_retries=spec.max_retries,
            on_error=spec.on_error,
            batch_timeout_s=spec.batch_timeout_s,
            preserve_order=spec.preserve_order,
        )
        if spec.reads is not None:
            fields.append(f"reads=[{', '.join(spec.reads)}]")
        declared = self.declared
        if isinstance(declared, InferredSchema) and not declared.known:
            columns = "schema of its first output batch"
        else:
            columns = ", ".join(self.declared_schema.names)
        keeps = "input + " if spec.passthrough else ""
        return f"{_VERB_KIND.get(spec.verb, 'Udf')} {spec.name} -> {keeps}[{columns}] " + " ".join(
            fields
        )


def execution_fields(
    *,
    backend: str,
    batch_size: int | None,
    actors: tuple[int, int],
    gpus: float = 0,
    cpus: float | None = None,
    memory: int | None = None,
    is_async: bool = False,
    async_limit: str = "",
    max_retries: int = 0,
    on_error: str = "raise",
    batch_timeout_s: float | None = None,
    preserve_order: bool = True,
) -> list[str]:
    """How a UDF step runs, as ``explain()`` shows it: backend, batch size and actors always,
    the other options when they differ from their defaults. One format for ``map_batches``
    steps and for column UDF calls before the optimizer lifts them into steps."""
    low, high = actors
    fields = [
        f"backend={backend}",
        f"batch_size={batch_size or 'default'}",
        f"concurrency={low if low == high else f'({low}, {high})'}",
    ]
    if gpus:
        fields.append(f"gpus={gpus:g}")
    if cpus:
        fields.append(f"cpus={cpus:g}")
    if memory:
        fields.append(f"memory={memory}")
    if is_async:
        fields.append(f"async {async_limit}".rstrip())
    if max_retries:
        fields.append(f"max_retries={max_retries}")
    if on_error != "raise":
        fields.append(f"on_error={on_error}")
    if batch_timeout_s is not None:
        fields.append(f"batch_timeout_s={batch_timeout_s:g}")
    if not preserve_order:
        fields.append("preserve_order=False")
    return fields
