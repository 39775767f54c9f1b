"""Delta Lake tables (the ``deltalake`` package, delta-rs): ``read_deltalake`` and
``write_deltalake``.

Reading: one version of the table (the latest when the relation is built, or the one asked
for), opened by each action as ``DeltaTable.to_pyarrow_dataset()``: a Parquet dataset whose
files carry their statistics, so the columns and filters DuckDB pushes into it skip whole
files and row groups. Its files are read by Arrow's own filesystems (local, and S3 with the
options in vane's spelling or delta-rs's), never through delta-rs's, which is Python called
from Arrow's threads (``_native_filesystem``).

Writing: delta-rs's ``write_deltalake`` takes the rows as one stream (a ``RecordBatchReader``
fed by the plan) and writes Parquet files under the table's directory, then commits them as
one JSON entry in ``_delta_log/`` (the next version number, created only if absent: Delta's
atomic step). A failure or a kill before that entry exists leaves the table at its previous
version; data files already written are referenced by no version (``DeltaTable.vacuum``
removes them). The whole stream goes to one writer on the driver: delta-rs writes data files
only inside ``write_deltalake``, which also commits them. (It can commit files written by others,
``DeltaTable.create_write_transaction``, so workers could write Parquet with Delta's column
statistics themselves: not done yet.)

What Delta cannot hold is refused before anything is written, naming the column: unsigned
integers (delta-rs would store their bits as the signed type of the same width), times of day,
and nanosecond timestamps (Delta keeps microseconds). Second and millisecond timestamps are
stored as microseconds, zoned timestamps as UTC instants, fixed-size lists as lists: the values
stay as they were.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from vane._deps import require
from vane.errors import ConfigurationError, SinkError, SourceError, VaneError
from vane.io.storage import Location, locate, protocol_of
from vane.io.tables.base import (
    TablePart,
    check_mode,
    check_types,
)
from vane.io.tables.options import in_vane_spelling, library_options

MODES = ("error", "append", "overwrite")


def _deltalake() -> Any:
    return require("deltalake", extra="delta")


def _where(uri: str) -> str:
    if "://" in uri and not uri.startswith("file://"):
        return uri
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return str(Path(uri).expanduser().absolute())


def _table(uri: str, version: int | None, options: Mapping[str, str] | None) -> Any:
    deltalake = _deltalake()
    return deltalake.DeltaTable(uri, version=version, storage_options=dict(options or {}) or None)


def _s3_location(uri: str, given: Mapping[str, Any] | None) -> Location | None:
    """Where Arrow's own (C++) S3 filesystem reads a table in S3 from, with the options in
    vane's spelling or object_store's (None: a local table; a store Arrow has no filesystem of
    its own for in vane; or an option only delta-rs's reader takes)."""
    if protocol_of(uri) not in ("s3", "s3a"):
        return None
    options = in_vane_spelling("read_deltalake", given)
    if options is None:
        return None
    return locate(uri, options, "read_deltalake")


def _native_filesystem(uri: str, location: Location | None) -> Any:
    """A filesystem in C++ for Arrow's scan of the table, rooted at it. delta-rs's own
    (``to_pyarrow_dataset``'s default) is Python, called from Arrow's I/O threads: a scan that
    stops early (a ``limit``, a ``first``) leaves reads in flight that enter Python as the
    interpreter exits, and the process crashes or hangs at exit, after the work. (None:
    delta-rs's, for a table ``_s3_location`` gives no place.)"""
    from pyarrow import fs

    if protocol_of(uri) is None:
        return fs.SubTreeFileSystem(uri, fs.LocalFileSystem())
    if location is None:
        return None
    return fs.SubTreeFileSystem(location.path.rstrip("/"), location.store.filesystem())


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class DeltaSource:
    """A Delta table at one version."""

    uri: str
    version: int
    storage_options: Mapping[str, str] | None = None  # delta-rs's spelling
    location: Location | None = None  # where Arrow reads the table's objects (``_s3_location``)

    @classmethod
    def at(
        cls, uri: str, version: int | None, storage_options: Mapping[str, str] | None
    ) -> DeltaSource:
        uri = _where(uri)
        options = library_options("read_deltalake", uri, storage_options, "delta")
        table = cls._open(uri, version, options)
        return cls(uri, int(table.version()), options, _s3_location(uri, storage_options))

    @staticmethod
    def _open(uri: str, version: int | None, options: Mapping[str, str] | None) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(
                uri, version=version, storage_options=dict(options or {}) or None
            )
        except Exception as exc:  # delta-rs raises DeltaError / TableNotFoundError (Exception)
            raise SourceError(
                f"read_deltalake(): cannot open the Delta table {uri!r}"
                + (f" at version {version}" if version is not None else "")
                + f": {_first_line(exc)}. Check the path (the directory holding _delta_log/) "
                "and, for object stores, storage_options="
            ) from exc

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = self.open().schema
        return schema

    def open(self) -> Any:
        table = self._open(self.uri, self.version, self.storage_options)
        try:
            return table.to_pyarrow_dataset(filesystem=_native_filesystem(self.uri, self.location))
        except Exception as exc:
            raise SourceError(
                f"read_deltalake(): cannot read {self.uri!r} (version {self.version}): "
                f"{_first_line(exc)}"
            ) from exc

    def describe(self) -> str:
        return f"ReadDeltaLake {self.uri} (version {self.version})"


# ---- writing ---------------------------------------------------------------------------------


def _refuse(kind: pa.DataType) -> str | None:
    if pa.types.is_unsigned_integer(kind):
        return (
            "Delta Lake cannot hold (it has no unsigned integers; delta-rs would store the "
            "bits as a signed integer, changing large values)"
        )
    if pa.types.is_time(kind):
        return "Delta Lake cannot hold (it has no time-of-day type)"
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        return "Delta Lake cannot hold exactly (it keeps microseconds)"
    if pa.types.is_map(kind) and (_timestamps(kind.key_type) or _timestamps(kind.item_type)):
        return "delta-rs cannot write (timestamps inside a map)"
    return None


def _timestamps(kind: pa.DataType) -> bool:
    if pa.types.is_timestamp(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_timestamps(f.type) for f in kind)
    if pa.types.is_map(kind):
        return _timestamps(kind.key_type) or _timestamps(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _timestamps(kind.value_type)
    return False


def _fix(column: str) -> str:
    return (
        f"Cast it first to a type Delta holds, for example with_column({column!r}, "
        f"'{column}::BIGINT') for an unsigned integer, '{column}::TIMESTAMP' for nanoseconds "
        f"(dropping them), or '{column}::VARCHAR' for a time"
    )


@dataclass(frozen=True)
class DeltaSink:
    """What ``write_deltalake`` was asked for."""

    uri: str
    mode: str = "error"
    partition_by: tuple[str, ...] = ()
    schema_mode: str | None = None
    storage_options: Mapping[str, str] | None = None
    target_file_size: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri:
            raise ConfigurationError(f"write_deltalake() needs a table uri, got {self.uri!r}")
        check_mode("write_deltalake", self.mode, MODES)
        if self.schema_mode not in (None, "merge", "overwrite"):
            raise ConfigurationError(
                f"write_deltalake(): schema_mode={self.schema_mode!r} is not None, 'merge' or "
                "'overwrite'"
            )
        object.__setattr__(self, "uri", _where(self.uri))
        options = library_options("write_deltalake", self.uri, self.storage_options, "delta")
        object.__setattr__(self, "storage_options", options)

    @property
    def path(self) -> str:
        return self.uri

    @property
    def single_file(self) -> bool:
        return True  # delta-rs writes the whole stream and commits it in one call

    def check_schema(self, schema: pa.Schema) -> None:
        check_types("write_deltalake", schema, _refuse, _fix)
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise ConfigurationError(
                f"write_deltalake(): partition_by names {missing}, which the relation does not "
                f"have; its columns are {', '.join(schema.names)}"
            )

    def start(self) -> DeltaWrite:
        existing = self._existing()
        if existing is not None and self.mode == "error":
            raise SinkError(
                f"write_deltalake(): {self.uri!r} already holds a Delta table (version "
                f"{existing.version()}); mode='error' makes a new one. Pass mode='append' to add "
                "rows or mode='overwrite' to replace them"
            )
        before = frozenset(_added(existing)) if existing is not None else frozenset()
        return DeltaWrite(self, TableWriter(self), before)

    def _existing(self) -> Any:
        deltalake = _deltalake()
        uri, options = self.uri, dict(self.storage_options or {}) or None
        if not deltalake.DeltaTable.is_deltatable(uri, storage_options=options):
            if "://" not in uri and _failed_create(Path(uri)):
                # A first write that died before its commit (a kill): its data files, in no
                # version. They go, as the next write's own would on failure.
                shutil.rmtree(uri, ignore_errors=True)
                return None
            if "://" not in uri and Path(uri).exists() and any(Path(uri).iterdir()):
                raise SinkError(
                    f"write_deltalake(): {uri!r} exists and is not a Delta table (no "
                    "_delta_log/); choose another path"
                )
            return None
        return _table(uri, None, self.storage_options)


# delta-rs's data files: part-00000-<uuid>-c000.snappy.parquet, and while one is written (on a
# local disk) the same name with #<n> after it, renamed when the file is whole.
_DATA_FILE = re.compile(r"part-\d{5}-[0-9a-f-]{36}-c\d{3}(\.[a-z0-9]+)?\.parquet(#\d+)?")


def _failed_create(path: Path) -> bool:
    """``path`` holds only what a first write that never committed leaves: delta-rs's data
    files, whole or half-written, perhaps in partition folders (``k=v``), and no ``_delta_log``
    (delta-rs writes the log's first entry last)."""
    if not path.is_dir():
        return False
    found = False
    for entry in path.rglob("*"):
        if entry.is_dir():
            if "=" not in entry.name:
                return False
        elif _DATA_FILE.fullmatch(entry.name):
            found = True
        else:
            return False
    return found


def _added(table: Any) -> dict[str, int]:
    """The data files of a table's version: path -> bytes."""
    actions = pa.table(table.get_add_actions(flatten=True))
    return dict(
        zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            strict=True,
        )
    )


@dataclass(frozen=True)
class TableWriter:
    """Streams the rows into delta-rs, which writes and commits them."""

    sink: DeltaSink

    def write(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, worker: str | None = None
    ) -> list[TablePart]:
        write_deltalake = _deltalake().write_deltalake
        sink = self.sink  # delta-rs checks an append's columns against the table's
        rows = [0]

        def counted() -> Iterable[pa.RecordBatch]:
            for batch in batches:
                rows[0] += batch.num_rows
                yield batch

        reader = pa.RecordBatchReader.from_batches(schema, counted())
        try:
            write_deltalake(
                sink.uri,
                reader,
                mode=sink.mode,
                partition_by=list(sink.partition_by) or None,
                schema_mode=sink.schema_mode,
                storage_options=dict(sink.storage_options or {}) or None,
                target_file_size=sink.target_file_size,
            )
        except VaneError:
            raise
        except Exception as exc:  # DeltaError, or the stream's own failure through it
            raise SinkError(
                f"write_deltalake(): writing {sink.uri!r} failed: {_first_line(exc)}. Nothing "
                "was committed: the table is at its previous version"
            ) from exc
        return [TablePart(rows[0], 0, 0, schema)]


class DeltaWrite:
    """One ``write_deltalake`` in progress: the writer commits; ``commit`` reports what the
    new version added."""

    def __init__(self, sink: DeltaSink, writer: TableWriter, before: frozenset[str]) -> None:
        self.sink = sink
        self.writer = writer
        self.before = before

    def commit(self, parts: list[TablePart]) -> Any:
        from vane.io.sinks import Committed

        table = _table(self.sink.uri, None, self.sink.storage_options)
        added = {p: size for p, size in _added(table).items() if p not in self.before}
        return Committed(self.sink.uri, sum(p.rows for p in parts), len(added), sum(added.values()))

    def abort(self) -> None:
        """Nothing to undo: delta-rs commits nothing unless the whole stream was written."""
