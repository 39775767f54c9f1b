"""File sinks: Parquet, CSV and newline-delimited JSON, streamed into a staging directory that
is committed atomically (see ``commit``).

Unpartitioned output is written from the relation's Arrow stream, in order, by the writers in
``formats``; ``rows_per_file`` cuts the stream into files with zero-copy slices. Partitioned
output is DuckDB's ``COPY ... PARTITION_BY``, which writes hive-style ``key=value`` directories.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import duckdb
import pyarrow as pa

from vane._arrow import Rechunker
from vane._sql import duckdb_message, quote_ident
from vane.config import get_config
from vane.errors import ConfigurationError, ExecutionError, VaneError
from vane.io.commit import MODES, Staging, WriteMode
from vane.io.files import SINGLE_FILE_SUFFIXES, is_uri
from vane.plan.nodes import FileFormat, PlanNode

if TYPE_CHECKING:
    from vane.io.formats import FileWriter


class RowSource(Protocol):
    """What a sink reads from: the runner's view of one action."""

    def reader(self, node: PlanNode, batch_size: int) -> pa.RecordBatchReader: ...
    def relation(self, node: PlanNode, cursor: Cursor) -> duckdb.DuckDBPyRelation: ...
    def cursor(self) -> Cursor: ...


Cursor = duckdb.DuckDBPyConnection

_COPY_FORMAT = {
    "parquet": "FORMAT parquet",
    "csv": "FORMAT csv, HEADER true",
    "json": "FORMAT json",
}
_SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}


@dataclass(frozen=True)
class WriteResult:
    """What a write produced. ``str()`` reads as one line for a log."""

    path: str
    rows: int
    files: int
    bytes: int
    seconds: float

    def __str__(self) -> str:
        return (
            f"wrote {self.rows:,} row{'s' * (self.rows != 1)} to {self.path} in {self.files} file"
            f"{'s' * (self.files != 1)} ({self.bytes / 1e6:,.1f} MB) in {self.seconds:.2f} s"
        )


@dataclass(frozen=True)
class FileSink:
    format: FileFormat
    path: str
    mode: WriteMode = "error"
    partition_by: tuple[str, ...] = ()
    rows_per_file: int | None = None

    def __post_init__(self) -> None:
        caller = f"write_{self.format}"
        if not isinstance(self.path, str) or not self.path:
            raise ConfigurationError(f"{caller}() needs a destination path, got {self.path!r}")
        if is_uri(self.path):
            raise ConfigurationError(
                f"{caller}(): writing to {self.path!r} is not supported; only local paths are. "
                "Write to a local directory and copy it to object storage"
            )
        if self.mode not in MODES:
            raise ConfigurationError(f"{caller}(): mode={self.mode!r} is not one of {MODES}")
        if (self.partition_by or self.rows_per_file) and self.path.endswith(
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
        return self.path.endswith(SINGLE_FILE_SUFFIXES[self.format]) and not (
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
        nested = [f.name for f in schema if pa.types.is_nested(f.type)]
        if self.format == "csv" and nested:
            raise ConfigurationError(
                f"write_csv(): CSV cannot hold the nested column(s) {nested} (lists, structs, "
                "maps). Write Parquet or JSON instead, or turn them into text first, for example "
                f"with_column({nested[0]!r}, '{nested[0]}::VARCHAR')"
            )

    def write(self, plan: PlanNode, source: RowSource) -> WriteResult:
        """Stream ``plan``'s rows into staged files, then commit them; on failure nothing
        changes."""
        started = time.perf_counter()
        destination = Path(self.path).expanduser().absolute()
        staging = Staging(destination, self.mode, single_file=self.single_file)
        try:
            if self.partition_by:
                count = self._copy_partitioned(plan, source, staging)
            else:
                reader = source.reader(plan, get_config().batch_size)
                count = self._write_batches(reader, staging, source)
            staged = staging.files()
            nbytes = sum(f.stat().st_size for f in staged)
            staging.commit()
        except VaneError:
            staging.abort()
            raise
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            # DuckDB's errors reach us directly, or through the Arrow stream as Arrow/OS errors.
            staging.abort()
            raise ExecutionError(
                f"writing {self.path!r} failed: {duckdb_message(exc)}. Nothing was written; "
                f"{self.path!r} is as it was"
            ) from exc
        except BaseException:
            staging.abort()
            raise
        return WriteResult(
            str(destination), count, len(staged), nbytes, time.perf_counter() - started
        )

    # ---- one file per run of rows, written from the Arrow stream in order --------------------

    def _file_path(self, staging: Staging, part: int) -> Path:
        if self.single_file:
            return staging.directory / Path(self.path).name
        return staging.directory / f"part-{staging.token}-{part:05d}{_SUFFIX[self.format]}"

    def _write_batches(
        self, reader: pa.RecordBatchReader, staging: Staging, source: RowSource
    ) -> int:
        # pyarrow's writers load on first write, not at `import vane`.
        from vane.io.formats import CsvFile, JsonFile, ParquetFile

        json_cursor = source.cursor() if self.format == "json" else None

        def open_file(path: Path, first: pa.RecordBatch) -> FileWriter:
            if self.format == "parquet":
                return ParquetFile(path, first)
            if self.format == "csv":
                return CsvFile(path, first)
            assert json_cursor is not None
            return JsonFile(path, first, json_cursor)

        try:
            if self.rows_per_file is None:
                return _write_file(
                    self._file_path(staging, 0), iter(reader), reader.schema, open_file
                )
            rechunker = Rechunker(iter(reader))
            rows = part = 0
            while part == 0 or not rechunker.exhausted:
                path = self._file_path(staging, part)
                rows += _write_file(
                    path, rechunker.take(self.rows_per_file), reader.schema, open_file
                )
                part += 1
            return rows
        finally:
            if json_cursor is not None:
                json_cursor.close()

    # ---- partitioned: DuckDB's COPY ... PARTITION_BY writes hive-style directories ------------

    def _copy_partitioned(self, plan: PlanNode, source: RowSource, staging: Staging) -> int:
        cursor = source.cursor()
        if self.rows_per_file is None:
            relation = source.relation(plan, cursor)
            return self._copy(cursor, relation, staging, 0)
        # Cut the stream into runs of rows_per_file and COPY each run: every partition file then
        # holds at most that many rows (DuckDB's own file-size options are approximate).
        reader = source.reader(plan, min(self.rows_per_file, get_config().batch_size))
        rechunker = Rechunker(iter(reader))
        count = part = 0
        while not rechunker.exhausted:
            piece = pa.RecordBatchReader.from_batches(
                reader.schema, rechunker.take(self.rows_per_file)
            )
            count += self._copy(cursor, cursor.from_arrow(piece), staging, part)
            part += 1
        return count

    def _copy(
        self, cursor: Cursor, relation: duckdb.DuckDBPyRelation, staging: Staging, part: int
    ) -> int:
        keys = ", ".join(quote_ident(c) for c in self.partition_by)
        options = [
            _COPY_FORMAT[self.format],
            f"PARTITION_BY ({keys})",
            f"FILENAME_PATTERN 'part-{staging.token}-{part:05d}-{{i}}'",
            f"FILE_EXTENSION '{_SUFFIX[self.format].lstrip('.')}'",
            "OVERWRITE_OR_IGNORE true",
        ]
        view = f"_vane_sink_{staging.token}_{part}"
        cursor.register(view, relation)
        target = "'" + os.fspath(staging.directory).replace("'", "''") + "'"
        try:
            result = cursor.execute(f"COPY {view} TO {target} ({', '.join(options)})").fetchall()
        finally:
            cursor.unregister(view)
        return int(result[0][0]) if result else 0


def _write_file(
    path: Path,
    batches: Iterator[pa.RecordBatch],
    schema: pa.Schema,
    open_file: Callable[[Path, pa.RecordBatch], FileWriter],
) -> int:
    """Write ``batches`` to one new file; an empty run still makes a file that holds the schema."""
    writer: FileWriter | None = None
    rows = 0
    try:
        for batch in batches:
            if writer is None:
                writer = open_file(path, batch)
            writer.write(batch)
            rows += batch.num_rows
        if writer is None:
            writer = open_file(path, pa.RecordBatch.from_pylist([], schema=schema))
    finally:
        if writer is not None:
            writer.close()
    return rows
