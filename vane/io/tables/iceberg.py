"""Apache Iceberg tables (pyiceberg): ``read_iceberg`` and ``write_iceberg``.

A table is named by its identifier (``"namespace.table"``) and a catalog, given as Ray Data
gives it: ``catalog_kwargs={"name": ..., "type": "sql" | "rest" | "glue" | ..., ...}`` for
``pyiceberg.catalog.load_catalog`` (a SQL catalog on SQLite needs no server); or it is a
``pyiceberg.table.Table`` already loaded, as Daft takes it. ``storage_options`` are spelled
as every vane reader takes them (``endpoint_url``, ``key``, ...) and become the catalog's FileIO
properties (``"s3.endpoint"``, ``"s3.access-key-id"``, ...: ``options.py``) when the warehouse
is on S3; FileIO properties given in ``catalog_kwargs`` win.

Reading: one snapshot (the current one when the relation is built, or ``snapshot_id``),
scanned by each action with pyiceberg's ``scan(row_filter, selected_fields)``: the filter
prunes data files by the manifests' statistics and row groups by Parquet's, and only the
selected columns are read. The batches stream into DuckDB (``to_arrow_batch_reader``).

Writing:

    write   Parquet data files written by pyiceberg's writer (field ids, column statistics,
            partitions) from pieces of the stream of at most FILE_BYTES each: memory holds
            one piece, whatever the input's size; no snapshot references them yet
    commit  one transaction: for an overwrite, delete every row; then a fast append of the
            files, and Transaction.commit_transaction(): the catalog swaps the table's
            metadata pointer from the version the write started on to the new one, only if
            it is still that (a SQL catalog's conditional UPDATE): Iceberg's atomic step

A failure before the commit, or a failed commit, leaves the table at its previous snapshot and
removes the data files the write made; after a kill they stay, referenced by no snapshot
(orphan-file maintenance removes them). An identifier that names no table yet is created
empty, with the relation's columns, when the write starts (a failed first write leaves that
empty table). The data files are written by whoever produces the rows (Ray tasks, one piece
per block, on the Ray runner); the driver holds the transaction and commits.

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
from vane.io.tables.base import TablePart, check_mode, check_types
from vane.io.tables.options import library_options

MODES = ("append", "overwrite")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Catalog:
    """A catalog as ``load_catalog(name, **properties)`` loads it: ``catalog_kwargs`` (values
    as given: a REST catalog's ``auth`` is a dict) with ``storage_options`` among the
    properties, where pyiceberg's FileIO reads them."""

    name: str
    properties: tuple[tuple[str, Any], ...]

    @classmethod
    def of(
        cls, caller: str, kwargs: Mapping[str, Any] | None, storage: Mapping[str, str] | None
    ) -> Catalog:
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigurationError(
                f"{caller}(): catalog_kwargs= takes a dict, such as {{'name': 'default', "
                "'type': 'sql', 'uri': 'sqlite:///catalog.db', 'warehouse': 'file:///wh'}"
            )
        properties = {str(k): v for k, v in (kwargs or {}).items()}
        name = str(properties.pop("name", "default"))
        warehouse = properties.get("warehouse")
        given = library_options(
            caller, warehouse if isinstance(warehouse, str) else None, storage, "iceberg"
        )
        for key, value in (given or {}).items():
            properties.setdefault(key, value)  # FileIO properties in catalog_kwargs win
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

        if isinstance(self.row_filter, str):
            from pyiceberg.expressions.parser import parse

            try:
                parse(self.row_filter)
            except Exception as exc:  # pyparsing's ParseException: a page of grammar
                raise ConfigurationError(
                    f"read_iceberg(): row_filter={self.row_filter!r} is not pyiceberg's filter "
                    "syntax (comparisons, IN, IS NULL, IS NAN, LIKE, BETWEEN, with AND, OR, "
                    "NOT). For other predicates, filter the relation: "
                    "vane.read_iceberg(...).filter('...')"
                ) from exc
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
        scan = self._scan()
        try:
            reader: pa.RecordBatchReader = scan.to_arrow_batch_reader()
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
        return False  # data files are written by any worker, added by the driver's commit

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


# A data file's worth of rows, held in memory while it is written: pyiceberg would gather
# write.target-file-size-bytes (512 MB of Arrow data by default) of a stream before writing,
# and peak memory grew with the input up to that (433 MB for 0.5M embedding rows, 833 MB for 2M).
FILE_ROWS = 1_000_000
FILE_BYTES = 64 * 2**20


class IcebergWrite:
    """One ``write_iceberg`` in progress: data files written as the rows come (by the driver
    or by workers), then one transaction adds them (after removing every row, for an
    overwrite) and commits."""

    def __init__(self, sink: IcebergSink, table: Any) -> None:
        self.sink = sink
        self.table = table
        self.transaction = table.transaction()
        self.writer = DataFileWriter(sink.path, self.transaction.table_metadata, table.io)

    def commit(self, parts: list[TablePart]) -> Any:
        from pyiceberg.expressions import AlwaysTrue

        from vane.io.sinks import Committed

        files = [f for p in parts for f in (p.payload or ())]
        properties = dict(self.sink.snapshot_properties or {})
        transaction = self.transaction
        try:
            if self.sink.mode == "overwrite":
                transaction.delete(AlwaysTrue(), snapshot_properties=properties)
            with transaction.update_snapshot(snapshot_properties=properties).fast_append() as add:
                for data_file in files:
                    add.append_data_file(data_file)
            transaction.commit_transaction()
        except Exception as exc:  # CommitFailedException: another writer committed first
            _remove(self.table.io, [f.file_path for f in files])
            raise SinkError(
                f"write_iceberg(): committing {self.sink.path!r} failed: {_first_line(exc)}. "
                "The table is at its previous snapshot (another writer may have committed "
                "meanwhile: write again)"
            ) from exc
        return Committed(
            self.sink.path,
            sum(p.rows for p in parts),
            len(files),
            sum(int(f.file_size_in_bytes) for f in files),
        )

    def abort(self) -> None:
        """Nothing to undo: a writer that fails removes its own data files, and no snapshot
        references any of them."""


def _remove(io: Any, paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(Exception):  # best effort: orphan-file cleanup remains
            io.delete(path)


@dataclass(frozen=True, eq=False)
class DataFileWriter:
    """Writes rows as Iceberg data files (pyiceberg's writer: field ids, statistics,
    partitions), a bounded piece at a time, for the table as it was when the write started;
    picklable (the metadata and the FileIO), so workers write their share."""

    table_name: str
    metadata: Any  # pyiceberg TableMetadata
    io: Any  # pyiceberg FileIO

    def write(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, worker: str | None = None
    ) -> list[TablePart]:
        import itertools
        import uuid

        from pyiceberg.io.pyarrow import (
            _check_pyarrow_schema_compatible,
            _dataframe_to_data_files,
        )

        from vane._arrow import coalesced

        try:
            _check_pyarrow_schema_compatible(
                self.metadata.schema(),
                provided_schema=schema,
                downcast_ns_timestamp_to_us=False,
                format_version=self.metadata.format_version,
            )
        except ValueError as exc:
            raise SinkError(
                f"write_iceberg(): the rows do not fit the columns of {self.table_name}:\n"
                f"{exc}\nSelect and cast the columns to the table's; nothing was written"
            ) from exc
        # a name of its own for each writer's files: pyiceberg names them by uuid and counter
        write_uuid, counter = uuid.uuid4(), itertools.count(0)
        files: list[Any] = []
        rows = 0
        try:
            for piece in coalesced(batches, FILE_ROWS, FILE_BYTES):
                _check_struct_lists(self.table_name, piece, rows)
                files.extend(
                    _dataframe_to_data_files(
                        table_metadata=self.metadata,
                        df=piece,
                        io=self.io,
                        write_uuid=write_uuid,
                        counter=counter,
                    )
                )
                rows += piece.num_rows
        except BaseException as exc:
            _remove(self.io, [f.file_path for f in files])
            if isinstance(exc, VaneError) or not isinstance(exc, Exception):
                raise
            # pyiceberg's error, or the stream's own failure through it
            raise _failed(self.table_name, exc) from exc
        size = sum(int(f.file_size_in_bytes) for f in files)
        return [TablePart(rows, len(files), size, schema, payload=files)]


def _check_struct_lists(table_name: str, piece: pa.Table, before: int) -> None:
    """pyiceberg (0.12) writes a null list of structs as an empty list, at any depth: a
    ``SinkError`` naming the column (and the row, at the top) before such a value is written."""
    for name in piece.column_names:
        offset = before
        for chunk in piece.column(name).chunks:
            found = _null_struct_list(name, chunk, None)
            if found is not None:
                where, row = found
                at = f" (row {offset + row} of the write)" if row is not None else ""
                raise SinkError(
                    f"write_iceberg(): column {where!r} holds a null list of structs{at}, which "
                    f"pyiceberg would write to {table_name} as an empty list. Replace the nulls "
                    f"first, for example with_column({name!r}, 'coalesce({name}, [])') at the "
                    "top level, or drop those rows; nothing was written"
                )
            offset += len(chunk)


def _null_struct_list(
    name: str, array: pa.Array, valid: pa.Array | None
) -> tuple[str, int | None] | None:
    """The first null list of structs in ``array`` where its parents are present (``valid``):
    its path and, at the top level, its row."""
    import pyarrow.compute as pc

    kind = array.type
    listed = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if listed or pa.types.is_fixed_size_list(kind):
        if pa.types.is_struct(kind.value_type) and array.null_count:
            nulls = array.is_null() if valid is None else pc.and_(array.is_null(), valid)
            if pc.any(nulls).as_py():
                top = valid is None and "[]" not in name
                return name, (pc.index(nulls, True).as_py() if top else None)
        return _null_struct_list(f"{name}[]", array.flatten(), None)
    if pa.types.is_struct(kind):
        present = array.is_valid() if valid is None else pc.and_(array.is_valid(), valid)
        for index, child in enumerate(kind):
            found = _null_struct_list(f"{name}.{child.name}", array.field(index), present)
            if found is not None:
                return found
    if pa.types.is_map(kind):
        return _null_struct_list(f"{name}.value", array.items, None)
    return None


def _failed(table_name: str, exc: BaseException) -> SinkError:
    return SinkError(
        f"write_iceberg(): writing {table_name!r} failed: {_first_line(exc)}. Nothing was "
        "committed: the table is at its previous snapshot"
    )
