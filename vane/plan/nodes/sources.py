"""Source nodes: files, Arrow tables and streams, materialized results, ranges."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from vane import _engine
from vane._sql import duckdb_message, quote_ident, sql_list
from vane._text import counted
from vane.errors import SourceError
from vane.io import readers
from vane.io.combine import check_files
from vane.io.files import FileFormat
from vane.io.spool import Spool
from vane.io.tables.base import TableSource
from vane.plan.nodes.base import Cursor, PlanNode, Relation

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
                + (f" and {counted(len(gone) - 1, 'other file')}" if len(gone) > 1 else "")
                + (" no longer exist" if len(gone) > 1 else " no longer exists")
            )
        if replaced:
            return self._changed(
                f"{replaced[0]!r}"
                + (f" and {counted(len(replaced) - 1, 'other file')}" if len(replaced) > 1 else "")
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
class LedgerScan(ArrowScan):
    """The rows of an error ledger that ``retry_failed`` runs again: an in-memory table like any
    other, which also says which ledger it came from (a write of it must replace that ledger
    in its commit, so no row is retried twice) and each UDF step's name in the pipeline that
    wrote the ledger, by step id (the retried steps keep their names, and their key columns, in
    the new ledger)."""

    ledger: str = ""
    labels: tuple[tuple[int, str], ...] = ()
    # Each step's key columns in that ledger, by name: the retry's own ledger keeps the same.
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The output the ledger goes with and the files it held then (None: not recorded).
    output: tuple[str, tuple[str, ...]] | None = None

    def describe(self) -> str:
        return f"FromErrorLedger {self.ledger!r} rows={self.table.num_rows}"


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
class TableScan(Source):
    """A table format's table at one version (``vane.io.tables``): each action opens it anew, as
    a dataset DuckDB scans with projection and filter pushdown, or a stream the format's scanner
    narrowed already."""

    table: TableSource

    def __post_init__(self) -> None:
        cursor = _engine.cursor()
        try:  # the schema as DuckDB gives it back, found without reading a row
            empty = cursor.from_arrow(self.table.schema.empty_table())
            self._set_schema(empty.limit(0).to_arrow_table().schema)
        except duckdb.Error as exc:
            raise SourceError(f"cannot read `{self.describe()}`: {duckdb_message(exc)}") from exc
        finally:
            cursor.close()

    def to_duckdb(self, cursor: Cursor) -> Relation:
        return cursor.from_arrow(self.table.open())

    def describe(self) -> str:
        return self.table.describe()


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
