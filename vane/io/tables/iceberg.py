"""Apache Iceberg tables (pyiceberg): ``read_iceberg`` and ``write_iceberg``.

A table is named by its identifier (``"namespace.table"``) and a catalog, given as Ray Data
gives it: ``catalog_kwargs={"name": ..., "type": "sql" | "rest" | "glue" | ..., ...}`` for
``pyiceberg.catalog.load_catalog`` (a SQL catalog on SQLite needs no server); or it is a
``pyiceberg.table.Table`` already loaded, as Daft takes it. ``storage_options`` are the
catalog's FileIO properties (``"s3.endpoint"``, ``"s3.access-key-id"``, ...).

Reading: one snapshot (the current one when the relation is built, or ``snapshot_id``),
scanned by each action with pyiceberg's ``scan(row_filter, selected_fields)``: the filter
prunes data files by the manifests' statistics and row groups by Parquet's, and only the
selected columns are read. The batches stream into DuckDB (``to_arrow_batch_reader``).

Writing, inside one pyiceberg transaction:

    write   Transaction.append / .overwrite (a RecordBatchReader fed by the plan): Parquet
            data files written in bounded pieces (``write.target-file-size-bytes``), and the
            new snapshot's manifests, all staged in the transaction
    commit  Transaction.commit_transaction(): the catalog swaps the table's metadata pointer
            from the version the write started on to the new one, only if it is still that
            (a SQL catalog's conditional UPDATE): Iceberg's atomic step

A failure or a kill before the commit leaves the table at its previous snapshot; data files
already written are referenced by no snapshot (remove them with orphan-file maintenance). An
identifier that names no table yet is created empty, with the relation's columns, when the
write starts (a failed first write leaves that empty table). Streaming writes go to
unpartitioned tables (pyiceberg writes a partitioned table from a whole in-memory table only).

Iceberg cannot hold, and the write refuses before anything is written: nanosecond timestamps
and times (format version 2), zoned timestamps in a zone other than UTC, and unsigned integers
of 32 or 64 bits. Smaller integers are stored as ``int``, second and millisecond timestamps as
microseconds, fixed-size lists as lists: the values stay as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from vane._deps import require
from vane.errors import ConfigurationError, SinkError, SourceError, VaneError
from vane.io.tables.base import TablePart, check_mode, check_storage_options, check_types

MODES = ("append", "overwrite")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Catalog:
    """How to load a catalog again (in each action): ``load_catalog(name, **properties)``."""

    name: str
    properties: tuple[tuple[str, str], ...]

    @classmethod
    def of(
        cls, caller: str, kwargs: Mapping[str, Any] | None, storage: Mapping[str, str] | None
    ) -> Catalog:
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigurationError(
                f"{caller}(): catalog_kwargs= takes a dict, such as {{'name': 'default', "
                "'type': 'sql', 'uri': 'sqlite:///catalog.db', 'warehouse': 'file:///wh'}"
            )
        properties = {str(k): str(v) for k, v in (kwargs or {}).items()}
        name = properties.pop("name", "default")
        properties.update(check_storage_options(caller, storage) or {})
        return cls(name, tuple(sorted(properties.items())))

    def load(self, caller: str) -> Any:
        require("pyiceberg", extra="iceberg")
        from pyiceberg.catalog import load_catalog

        try:
            return load_catalog(self.name, **dict(self.properties))
        except Exception as exc:  # pyiceberg's errors are plain exceptions of its own
            raise ConfigurationError(
                f"{caller}(): cannot load the Iceberg catalog {self.name!r}: "
                f"{_first_line(exc)}. Pass catalog_kwargs= as pyiceberg's load_catalog takes "
                "them, for example {'type': 'sql', 'uri': 'sqlite:///catalog.db', "
                "'warehouse': 'file:///path/to/warehouse'}"
            ) from exc


def _identifier(caller: str, table: object) -> str:
    if not isinstance(table, str) or not table:
        raise ConfigurationError(
            f"{caller}() takes a table identifier such as 'namespace.table' (with "
            f"catalog_kwargs=) or a pyiceberg Table, got {table!r}"
        )
    return table


def _is_table(table: object) -> bool:
    try:
        from pyiceberg.table import Table
    except ImportError:
        return False
    return isinstance(table, Table)


@dataclass(frozen=True, eq=False)
class IcebergSource:
    """A table at one snapshot, the columns to read and pyiceberg's row filter."""

    table: Any  # a pyiceberg Table (its metadata is the snapshot's)
    snapshot_id: int | None
    columns: tuple[str, ...] | None = None
    row_filter: Any = None

    @classmethod
    def at(
        cls,
        table: object,
        *,
        catalog_kwargs: Mapping[str, Any] | None,
        storage_options: Mapping[str, str] | None,
        snapshot_id: int | None,
        columns: tuple[str, ...] | None,
        row_filter: Any,
    ) -> IcebergSource:
        loaded: Any = (
            table if _is_table(table) else cls._load(table, catalog_kwargs, storage_options)
        )
        if snapshot_id is None:
            current = loaded.current_snapshot()
            snapshot_id = None if current is None else int(current.snapshot_id)
        if columns is not None:
            names = [f.name for f in loaded.schema().fields]
            missing = [c for c in columns if c not in names]
            if missing:
                raise ConfigurationError(
                    f"read_iceberg(): {loaded.name()} has no column "
                    f"{', '.join(map(repr, missing))}; its columns are {', '.join(names)}"
                )
        source = cls(loaded, snapshot_id, columns, row_filter)
        source.open().close()  # a row filter that does not parse fails here, not in an action
        return source

    @staticmethod
    def _load(
        table: object, kwargs: Mapping[str, Any] | None, storage: Mapping[str, str] | None
    ) -> Any:
        identifier = _identifier("read_iceberg", table)
        catalog = Catalog.of("read_iceberg", kwargs, storage).load("read_iceberg")
        try:
            return catalog.load_table(identifier)
        except Exception as exc:
            raise SourceError(
                f"read_iceberg(): cannot load the Iceberg table {identifier!r}: "
                f"{_first_line(exc)}. Check the identifier ('namespace.table') and the catalog"
            ) from exc

    def _scan(self) -> Any:
        from pyiceberg.expressions import AlwaysTrue

        return self.table.scan(
            row_filter=self.row_filter if self.row_filter is not None else AlwaysTrue(),
            selected_fields=self.columns or ("*",),
            snapshot_id=self.snapshot_id,
        )

    @property
    def schema(self) -> pa.Schema:
        reader = self.open()
        reader.close()
        return reader.schema

    def open(self) -> pa.RecordBatchReader:
        try:
            reader: pa.RecordBatchReader = self._scan().to_arrow_batch_reader()
        except Exception as exc:
            raise SourceError(
                f"read_iceberg(): cannot scan {self.table.name()}: {_first_line(exc)}"
            ) from exc
        return reader

    def describe(self) -> str:
        name = ".".join(self.table.name())
        return f"ReadIceberg {name} (snapshot {self.snapshot_id})"


# ---- writing ---------------------------------------------------------------------------------


def _refuse(kind: pa.DataType) -> str | None:
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        return "Iceberg (format version 2) cannot hold exactly: it keeps microseconds"
    if pa.types.is_time(kind) and kind.unit == "ns":
        return "Iceberg cannot hold exactly: its times keep microseconds"
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz not in ("UTC", "+00:00"):
        return "Iceberg cannot hold: its zoned timestamps are in UTC"
    if pa.types.is_uint64(kind) or pa.types.is_uint32(kind):
        # pyiceberg makes a uint32 an Iceberg int (32-bit, signed): large values would change
        return "Iceberg cannot hold exactly: it has no unsigned integers this wide"
    return None


def _fix(column: str) -> str:
    return (
        f"Cast it first, for example with_column({column!r}, '{column}::TIMESTAMP') or "
        f"'{column}::TIMESTAMPTZ' for a timestamp, '{column}::TIME' for a time, "
        f"'{column}::BIGINT' for a UINTEGER, '{column}::DECIMAL(20, 0)' for a UBIGINT"
    )


@dataclass(frozen=True, eq=False)
class IcebergSink:
    """What ``write_iceberg`` was asked for."""

    table: Any  # an identifier, or a pyiceberg Table
    mode: str = "append"
    catalog_kwargs: Mapping[str, Any] | None = None
    snapshot_properties: Mapping[str, str] | None = None
    storage_options: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_mode("write_iceberg", self.mode, MODES)
        if not _is_table(self.table):
            _identifier("write_iceberg", self.table)

    @property
    def path(self) -> str:
        if isinstance(self.table, str):
            return self.table
        return ".".join(self.table.name())

    @property
    def single_file(self) -> bool:
        return True  # one transaction, held by the driver, takes the stream

    def check_schema(self, schema: pa.Schema) -> None:
        check_types("write_iceberg", schema, _refuse, _fix)
        # kept for start(), which creates a missing table with these columns (the runner
        # checks the schema first, then starts)
        object.__setattr__(self, "_schema", schema)

    def start(self) -> IcebergWrite:
        """The table (created empty, with the relation's columns, if the identifier names
        none), and a transaction on its current metadata."""
        table = self.table if _is_table(self.table) else self._load_or_create()
        return IcebergWrite(self, table)

    def _load_or_create(self) -> Any:
        catalog = Catalog.of("write_iceberg", self.catalog_kwargs, self.storage_options)
        loaded = catalog.load("write_iceberg")
        identifier = str(self.table)
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

        try:
            return loaded.load_table(identifier)
        except NoSuchTableError:
            pass
        namespace = identifier.rsplit(".", 1)[0] if "." in identifier else None
        if namespace is None:
            raise ConfigurationError(
                f"write_iceberg(): {identifier!r} names no namespace; write to "
                f"'namespace.{identifier}'"
            )
        with contextlib.suppress(NamespaceAlreadyExistsError):
            loaded.create_namespace(namespace)
        try:
            return loaded.create_table(identifier, schema=self.__dict__["_schema"])
        except Exception as exc:
            raise SinkError(
                f"write_iceberg(): cannot create the Iceberg table {identifier!r}: "
                f"{_first_line(exc)}"
            ) from exc


class IcebergWrite:
    """One ``write_iceberg`` in progress: a pyiceberg transaction, committed once."""

    def __init__(self, sink: IcebergSink, table: Any) -> None:
        self.sink = sink
        self.table = table
        self.transaction = table.transaction()
        self.writer = TransactionWriter(self)

    def commit(self, parts: list[TablePart]) -> Any:
        from vane.io.sinks import Committed

        try:
            self.transaction.commit_transaction()
        except Exception as exc:  # CommitFailedException: another writer committed first
            raise SinkError(
                f"write_iceberg(): committing {self.sink.path!r} failed: {_first_line(exc)}. "
                "The table is at its previous snapshot (another writer may have committed "
                "meanwhile: write again)"
            ) from exc
        self.table.refresh()
        snapshot = self.table.current_snapshot()
        summary = dict(snapshot.summary.additional_properties) if snapshot is not None else {}
        return Committed(
            self.sink.path,
            sum(p.rows for p in parts),
            int(summary.get("added-data-files", 0)),
            int(summary.get("added-files-size", 0)),
        )

    def abort(self) -> None:
        """Nothing to undo: the transaction is never committed (its data files are left
        unreferenced)."""


class TransactionWriter:
    """Streams the rows into the write's transaction (on the driver only: it holds it)."""

    def __init__(self, write: IcebergWrite) -> None:
        self._write = write

    def write(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, worker: str | None = None
    ) -> list[TablePart]:
        sink, transaction = self._write.sink, self._write.transaction
        rows = [0]

        def counted() -> Iterable[pa.RecordBatch]:
            for batch in batches:
                rows[0] += batch.num_rows
                yield batch

        reader = pa.RecordBatchReader.from_batches(schema, counted())
        properties = dict(sink.snapshot_properties or {})
        try:
            if sink.mode == "overwrite":
                transaction.overwrite(reader, snapshot_properties=properties)
            else:
                transaction.append(reader, snapshot_properties=properties)
        except VaneError:
            raise
        except ValueError as exc:
            if rows[0] == 0 and "Mismatch in fields" in str(exc):  # checked before any row
                raise SinkError(
                    f"write_iceberg(): the rows do not fit the columns of {sink.path}:\n{exc}\n"
                    "Select and cast the columns to the table's; nothing was written"
                ) from exc
            raise _failed(sink, exc) from exc
        except Exception as exc:
            raise _failed(sink, exc) from exc
        return [TablePart(rows[0], 0, 0, schema)]


def _failed(sink: IcebergSink, exc: BaseException) -> SinkError:
    return SinkError(
        f"write_iceberg(): writing {sink.path!r} failed: {_first_line(exc)}. Nothing was "
        "committed: the table is at its previous snapshot"
    )
