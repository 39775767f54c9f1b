"""File sinks: Parquet, CSV and newline-delimited JSON, as ``start`` / ``write`` / ``commit`` /
``abort``.

The driver starts a write (``FileSink.start``: the destination is checked and a staging
directory made, see ``commit``); whoever produces the rows, the driver itself or workers on
other processes or machines, writes them with the write's picklable ``PartWriter`` and gets
back the ``Part`` files it wrote; the driver commits all the parts at once, atomically, or
aborts and nothing changes. ``write_to`` is that sequence for one stream of batches.

Files are written by pyarrow (Parquet, CSV) or rendered by DuckDB (JSON lines), in order;
``rows_per_file`` cuts the stream with zero-copy slices; ``partition_by`` writes hive-style
``key=value`` directories with bounded memory (``partitioned``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar

import duckdb
import pyarrow as pa

from vane._arrow import Rechunker, coalesced
from vane._sql import duckdb_message
from vane._text import counted
from vane.errors import ConfigurationError, ExecutionError, VaneError
from vane.io import object_puts
from vane.io.commit import MODES, Staging, WriteMode, abort_surely, begun, seen_through
from vane.io.files import EXTENSIONS, SINGLE_FILE_SUFFIXES, FileFormat, is_uri
from vane.observe.events import StageFinished, describe_usage, step_names

if TYPE_CHECKING:
    from vane.io.formats import FileWriter
    from vane.io.object_commit import ObjectStaging
    from vane.io.storage import Store

_SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}

# A Parquet file gets a row group per batch it is given, and a UDF's batches are often a few
# thousand rows: 2M rows out of a 4,096-row UDF made 489 row groups, written ~20 % slower than
# 31 of 65,536 rows, read back slower, with a footer that grew with the input. Small batches are
# joined up to these bounds first (the bytes bound keeps wide rows, embeddings say, from
# buffering 65,536 of them); the partitioned writer has its own buffers of the same size.
ROW_GROUP_ROWS = 65_536
ROW_GROUP_BYTES = 32 * 2**20
_Where = TypeVar("_Where", Path, BinaryIO)  # a file to create, or a stream open already


@dataclass(frozen=True)
class Committed:
    """What a committed write holds. The runner that ran the write makes it a ``WriteResult``:
    it alone knows when the action began (rows are computed as they are read, and DuckDB
    computes some before the first is written) and what its steps did."""

    path: str
    rows: int
    files: int
    bytes: int

    def result(self, seconds: float, steps: tuple[StageFinished, ...]) -> WriteResult:
        return WriteResult(self.path, self.rows, self.files, self.bytes, seconds, steps)


@dataclass(frozen=True)
class WriteResult:
    """What a write produced. ``str()`` reads as one line for a log. ``seconds`` is the whole
    write, from the call until it returned (reading, every step, writing, committing);
    ``steps`` holds each UDF step's summary (rows in and out, rows on_error handled, seconds,
    and what it counted: an AI function's requests, tokens, retries, cache hits and failures)."""

    path: str
    rows: int
    files: int
    bytes: int
    seconds: float
    steps: tuple[StageFinished, ...] = ()

    @property
    def usage(self) -> dict[str, dict[str, int]]:
        """Each counting step's counters by step: ``{"prompt[openai m]": {"requests": 5}}``
        (two steps of one name are told apart by their order: ``"embed"``, ``"embed #2"``)."""
        names = step_names(self.steps)
        return {name: dict(s.usage) for name, s in zip(names, self.steps, strict=True) if s.usage}

    def __str__(self) -> str:
        text = (
            f"wrote {counted(self.rows, 'row')} to {self.path} in {counted(self.files, 'file')} "
            f"({self.bytes / 1e6:,.1f} MB) in {self.seconds:.2f} s"
        )
        steps = [f"{name}: {describe_usage(usage)}" for name, usage in self.usage.items()]
        return text + (f" ({'; '.join(steps)})" if steps else "")


class Write(Protocol):
    """One write in progress, held by the driver: its ``writer`` (picklable) writes rows and
    returns parts, wherever it runs; ``commit`` makes them all visible at once, ``abort``
    leaves the destination as it was."""

    @property
    def writer(self) -> Any: ...

    def commit(self, parts: list[Any]) -> Committed: ...

    def abort(self) -> None: ...


class Sink(Protocol):
    """Where a write goes: files (``FileSink``) or a table format's table
    (``vane.io.tables``). ``single_file``: one writer on the driver takes the whole stream."""

    @property
    def path(self) -> str: ...

    @property
    def single_file(self) -> bool: ...

    def check_schema(self, schema: pa.Schema) -> None: ...

    def start(self) -> Write: ...


def check_columns(fmt: FileFormat, schema: pa.Schema) -> None:
    """Refuse columns a file of ``fmt`` cannot hold: CSV holds neither nested values nor bytes."""
    nested = [f.name for f in schema if pa.types.is_nested(f.type)]
    if fmt == "csv" and nested:
        raise ConfigurationError(
            f"write_csv(): CSV cannot hold the nested column(s) {nested} (lists, structs, "
            "maps). Write Parquet or JSON instead, or turn them into text first, for example "
            f"with_column({nested[0]!r}, '{nested[0]}::VARCHAR')"
        )
    binary = [
        f.name
        for f in schema
        if pa.types.is_binary(f.type)
        or pa.types.is_large_binary(f.type)
        or pa.types.is_fixed_size_binary(f.type)
    ]
    if fmt == "csv" and binary:
        raise ConfigurationError(
            f"write_csv(): CSV holds text, and {binary} hold bytes that need not be text. "
            "Write Parquet instead, or turn them into text first, for example "
            f"with_column({binary[0]!r}, 'hex({binary[0]})')"
        )


@dataclass(frozen=True)
class Part:
    """One file a writer put in the staging directory."""

    path: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class FileSink:
    """What the user asked ``write_parquet`` / ``write_csv`` / ``write_json`` for."""

    format: FileFormat
    path: str
    mode: WriteMode = "error"
    partition_by: tuple[str, ...] = ()
    rows_per_file: int | None = None
    # A remote destination's store options (``io/storage.py``), None for a local path.
    storage_options: tuple[tuple[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        caller = f"write_{self.format}"
        if not isinstance(self.path, str) or not self.path:
            raise ConfigurationError(f"{caller}() needs a destination path, got {self.path!r}")
        if self.path.lower().startswith(("http://", "https://")):
            raise ConfigurationError(
                f"{caller}(): {self.path!r} is an HTTP URL, which vane reads but cannot write "
                "to; write to an object store (s3://, gs://, az://...) or a local path"
            )
        if is_uri(self.path) and self.storage_options is None:
            from vane.io import storage

            options = storage.locate(self.path, None, caller).store.options
            object.__setattr__(self, "storage_options", options)
        if self.mode not in MODES:
            raise ConfigurationError(
                f"{caller}(): mode={self.mode!r} is not one of {', '.join(MODES)}"
            )
        lowered = self.path.lower()
        for other, suffixes in EXTENSIONS.items():
            if other != self.format and lowered.endswith(suffixes):
                raise ConfigurationError(
                    f"{caller}(): {self.path!r} names a {other.upper()} file, and this writes "
                    f"{self.format.upper()}. Name it {SINGLE_FILE_SUFFIXES[self.format][0]!r} "
                    f"or a folder, or use write_{other}()"
                )
        if (self.partition_by or self.rows_per_file) and lowered.endswith(
            SINGLE_FILE_SUFFIXES[self.format]
        ):
            raise ConfigurationError(
                f"{caller}(): partition_by and rows_per_file write several files, so the "
                f"destination must be a directory, and {self.path!r} names a file. Drop the "
                "extension, for example 'out/'"
            )
        if self.rows_per_file is not None and (
            isinstance(self.rows_per_file, bool)
            or not isinstance(self.rows_per_file, int)
            or self.rows_per_file <= 0
        ):
            raise ConfigurationError(
                f"{caller}(): rows_per_file must be a positive integer, got {self.rows_per_file!r}"
            )

    @property
    def single_file(self) -> bool:
        """A path ending in the format's extension, with no partitioning or file size, is one
        file; anything else is a directory of part files."""
        return self.path.lower().endswith(SINGLE_FILE_SUFFIXES[self.format]) and not (
            self.partition_by or self.rows_per_file
        )

    def check_schema(self, schema: pa.Schema) -> None:
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise ConfigurationError(
                f"write_{self.format}(): partition_by names {missing}, which the relation does "
                f"not have; its columns are {', '.join(schema.names)}"
            )
        if self.partition_by and len(self.partition_by) == len(schema.names):
            raise ConfigurationError(
                f"write_{self.format}(): partition_by names every column, leaving none to write"
            )
        check_columns(self.format, schema)

    def start(self) -> FileWrite:
        """Check the destination and stage a new write of it (in the driver)."""
        if is_uri(self.path):
            return self._start_remote()
        destination = Path(self.path).expanduser().absolute()
        staging = Staging(destination, self.mode, single_file=self.single_file)
        try:
            writer = PartWriter(
                format=self.format,
                directory=str(staging.directory),
                token=staging.token,
                single_name=destination.name if self.single_file else None,
                partition_by=self.partition_by,
                rows_per_file=self.rows_per_file,
            )
            return FileWrite(self, staging, writer)
        except BaseException:  # Ctrl-C between the staging and the write: nothing stays
            abort_surely(staging.abort)
            raise

    def _start_remote(self) -> FileWrite:
        from vane.io import storage
        from vane.io.object_commit import ObjectStaging

        location = storage.locate_with(self.path, self.storage_options or ())
        staging = ObjectStaging(location, self.mode, single_file=self.single_file)
        name = location.path.rstrip("/").rsplit("/", 1)[-1]
        writer = PartWriter(
            format=self.format,
            directory=staging.directory,
            token=staging.token,
            single_name=name if self.single_file else None,
            partition_by=self.partition_by,
            rows_per_file=self.rows_per_file,
            store=location.store,
        )
        return FileWrite(self, staging, writer)


class FileWrite:
    """One write in progress, held by the driver: its ``writer`` goes to whoever writes rows,
    then ``commit`` (or ``abort``) ends it."""

    def __init__(
        self, sink: FileSink, staging: Staging | ObjectStaging, writer: PartWriter
    ) -> None:
        self.sink = sink
        self.staging = staging
        self.writer = writer
        self.committed = False

    def commit(self, parts: list[Part]) -> Committed:
        if isinstance(self.staging, Staging):
            destination = str(self.staging.commit())
        else:
            rows = sum(p.rows for p in parts)
            destination = self.staging.commit([p.path for p in parts], rows)
        self.committed = True  # from here on an abort must leave the output alone
        return Committed(
            destination,
            sum(p.rows for p in parts),
            len(parts),
            sum(p.bytes for p in parts),
        )

    def abort(self) -> None:
        if not self.committed:
            self.staging.abort()


@dataclass(frozen=True)
class PartWriter:
    """Writes batches into a write's staging directory; picklable, so a worker process can
    write its share of the rows."""

    format: FileFormat
    directory: str
    token: str
    single_name: str | None = None
    partition_by: tuple[str, ...] = ()
    rows_per_file: int | None = None
    # Set for a remote write: ``directory`` is a path on this store, files are its objects.
    store: Store | None = None

    def write(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, worker: str | None = None
    ) -> list[Part]:
        """Write every batch; ``worker`` keeps file names apart when several write at once."""
        from vane import _engine

        cursor = _engine.cursor() if self.format == "json" else None
        try:
            open_file = _opener(self.format, cursor)
            if self.store is not None:
                return self._remote(batches, schema, open_file, worker)
            if self.partition_by:
                written = self._partitioned(iter(batches), open_file, worker)
            else:
                written = self._files(iter(batches), schema, open_file, worker)
        finally:
            if cursor is not None:
                cursor.close()
        return [Part(str(path), rows, path.stat().st_size) for path, rows in written]

    def _remote(
        self,
        batches: Iterable[pa.RecordBatch],
        schema: pa.Schema,
        open_file: Callable[[Path | BinaryIO, pa.Table], FileWriter],
        worker: str | None,
    ) -> list[Part]:
        """Each file an object, streamed to the store as it is written (S3: a multipart upload
        of a few MB at a time), so memory holds a part, never a file."""
        from vane.io.storage_errors import storage_errors

        store = self.store
        assert store is not None
        fs = store.filesystem()
        shown = store.url(self.directory)

        sizes: dict[str, int] = {}  # each object's bytes, as its stream counted them

        def open_object(path: Path, first: pa.Table) -> FileWriter:
            key = path.as_posix()
            stream = None
            try:
                stream = fs.open_output_stream(key)
                object_puts.opened(key, stream)  # the write's abort closes it, if nothing else
                return _ObjectFile(stream, first, open_file, key, sizes)
            except BaseException:
                # Closed now: a stream left to its destructor completes its upload whenever the
                # traceback that holds it goes, after the write's abort has listed what to remove.
                if stream is not None:
                    object_puts.finished(stream)
                    stream.close()
                raise

        with storage_errors(shown, "cannot write to", store):
            if self.partition_by:
                written = self._partitioned(iter(batches), open_object, worker, directories=False)
            else:
                written = self._files(iter(batches), schema, open_object, worker)
        return [
            Part(path.as_posix(), rows, sizes.get(path.as_posix(), 0)) for path, rows in written
        ]

    def _name(self, worker: str | None) -> Callable[[int], str]:
        tag = f"{self.token}-{worker}" if worker is not None else self.token
        return lambda number: f"part-{tag}-{number:05d}{_SUFFIX[self.format]}"

    def _files(
        self,
        batches: Iterator[pa.RecordBatch],
        schema: pa.Schema,
        open_file: Callable[[Path, pa.Table], FileWriter],
        worker: str | None,
    ) -> list[tuple[Path, int]]:
        directory, name = Path(self.directory), self._name(worker)

        def row_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
            return _tables(self.format, batches)

        if self.single_name is not None:
            path = directory / self.single_name
            return [(path, _write_file(path, row_groups(batches), schema, open_file))]
        if self.rows_per_file is None:
            path = directory / name(0)
            return [(path, _write_file(path, row_groups(batches), schema, open_file))]
        rechunker = Rechunker(batches)
        written = []
        number = 0
        while number == 0 or not rechunker.exhausted:
            path = directory / name(number)
            pieces = rechunker.take(self.rows_per_file)
            rows = _write_file(path, row_groups(pieces), schema, open_file)
            written.append((path, rows))
            number += 1
        return written

    def _partitioned(
        self,
        batches: Iterator[pa.RecordBatch],
        open_file: Callable[[Path, pa.Table], FileWriter],
        worker: str | None,
        *,
        directories: bool = True,
    ) -> list[tuple[Path, int]]:
        from vane.io.partitioned import PartitionedWriter

        writer = PartitionedWriter(
            Path(self.directory),
            self.partition_by,
            open_file,
            self._name(worker),
            self.rows_per_file,
            make_directories=directories,
        )
        try:
            for batch in batches:
                writer.write(batch)
        except BaseException:
            writer.abandon()
            raise
        return writer.close()


class _ObjectFile:
    """A file writer onto an object's output stream: closing it closes the stream, which
    completes the upload. A failed write closes it too; the object is then in no manifest,
    never read by vane, and removed by the next write (``object_commit``)."""

    def __init__(
        self,
        stream: Any,
        first: pa.Table,
        open_file: Callable[[Path | BinaryIO, pa.Table], FileWriter],
        key: str,
        sizes: dict[str, int],
    ) -> None:
        self._stream = stream  # on a failure here, the caller closes it
        self._file = open_file(stream, first)
        self._key, self._sizes = key, sizes

    def write(self, rows: pa.Table) -> None:
        self._file.write(rows)

    def close(self) -> None:
        """Close the file and complete the upload; its size is what the stream counted (no
        request to ask the store)."""
        try:
            self._file.close()
            self._sizes[self._key] = self._stream.tell()
        finally:
            self._stream.close()
            object_puts.finished(self._stream)


def _tables(fmt: FileFormat, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
    """What a file writer is given: each batch, or for Parquet row groups of a good size."""
    if fmt != "parquet":
        return (pa.Table.from_batches([batch]) for batch in batches)
    return coalesced(batches, ROW_GROUP_ROWS, ROW_GROUP_BYTES)


def write_stream(
    fmt: FileFormat, schema: pa.Schema, batches: Iterable[pa.RecordBatch], out: BinaryIO
) -> int:
    """``batches`` written to ``out``, an open binary stream (stdout, a pipe), as one file of
    ``fmt`` holds them, as they come; the rows written. Nothing is staged: what a stream was
    sent cannot be taken back."""
    check_columns(fmt, schema)
    from vane import _engine

    cursor = _engine.cursor() if fmt == "json" else None
    try:
        return _write_file(out, _tables(fmt, batches), schema, _opener(fmt, cursor))
    finally:
        if cursor is not None:
            cursor.close()


def _opener(
    fmt: FileFormat, cursor: duckdb.DuckDBPyConnection | None
) -> Callable[[Path | BinaryIO, pa.Table], FileWriter]:
    # pyarrow's writers load on first write, not at `import vane`.
    from vane.io.formats import CsvFile, JsonFile, ParquetFile

    def open_file(path: Path | BinaryIO, first: pa.Table) -> FileWriter:
        if fmt == "parquet":
            return ParquetFile(path, first)
        if fmt == "csv":
            return CsvFile(path, first)
        assert cursor is not None
        return JsonFile(path, first, cursor)

    return open_file


def _write_file(
    path: _Where,
    tables: Iterator[pa.Table],
    schema: pa.Schema,
    open_file: Callable[[_Where, pa.Table], FileWriter],
) -> int:
    """Write ``tables`` to one new file; an empty run still makes a file that holds the schema."""
    writer: FileWriter | None = None
    rows = 0
    try:
        for table in tables:
            if writer is None:
                writer = open_file(path, table)
            writer.write(table)
            rows += table.num_rows
        if writer is None:
            writer = open_file(path, schema.empty_table())
    finally:
        if writer is not None:
            writer.close()
    return rows


def write_to(
    sink: Sink,
    reader: pa.RecordBatchReader,
    parts: Callable[[PartWriter, pa.RecordBatchReader], list[Part]] | None = None,
) -> Committed:
    """Start a write, write ``reader``'s batches, commit; on any failure abort, so the
    destination is as it was. ``parts``: a resumable write's writing of its rows, which takes
    its kept parts and writes and keeps new ones after them (``parts.py``)."""
    write = sink.start()  # what it made is known by now (``commit.begun``), even if Ctrl-C
    begun(write)  # lands here, before the write itself is noted
    return _write_and_commit(sink, write, reader, parts)


def _write_and_commit(
    sink: Sink,
    write: Write,
    reader: pa.RecordBatchReader,
    kept: Callable[[PartWriter, pa.RecordBatchReader], list[Part]] | None = None,
) -> Committed:
    try:
        if kept is None:
            parts = write.writer.write(reader, reader.schema)
        else:
            parts = kept(write.writer, reader)
        seen_through(write)  # its commit begins: from here its own protocol answers for it
        return write.commit(parts)
    except VaneError:
        _abort(write)
        raise
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        # DuckDB's errors reach us directly, or through the Arrow stream as Arrow/OS errors.
        _abort(write)
        raise ExecutionError(
            f"writing {sink.path!r} failed: {duckdb_message(exc)}. Nothing was written; "
            f"{sink.path!r} is as it was"
        ) from exc
    except BaseException:
        _abort(write)
        raise


def _abort(write: Write) -> None:
    abort_surely(write.abort)
    seen_through(write)
