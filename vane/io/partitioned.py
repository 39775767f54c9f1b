"""Hive-partitioned output (``key=value/`` directories), streamed with bounded memory.

Each batch is sorted by its keys (a stable sort, so rows keep their order within a partition)
and cut into runs, one per partition. A partition's rows wait in a small buffer and go to its
file a row group at a time; all buffers together stay under a byte budget (the fullest is
written out when they would not), and at most ``MAX_OPEN_FILES`` files are open at once (the
least recently used is closed, and that partition continues in a new part file). Memory then
depends on the budget and the number of open files, never on the input's size; DuckDB's
``COPY ... PARTITION_BY``, used before, grew with it (2.8 GB for 20M rows with 100 keys).

Directory names follow DuckDB's: values percent-encoded, NULL as ``__HIVE_DEFAULT_PARTITION__``,
so DuckDB reads them back as the same values.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_OPEN_FILES = 128
BUFFER_BYTES = 32 * 2**20  # all partitions' pending rows together
ROW_GROUP_ROWS = 65_536  # a partition's rows are written once this many wait
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"

Key = tuple[str, ...]


class FileWriter(Protocol):
    def write(self, rows: pa.Table) -> None: ...
    def close(self) -> None: ...


OpenFile = Callable[[Path, pa.Table], FileWriter]


class _Partition:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.file: FileWriter | None = None
        self.path: Path | None = None  # of the open file
        self.file_rows = 0  # rows in the open file
        self.files = 0  # files started so far


class PartitionedWriter:
    """Write batches into ``key=value`` directories under ``root``; ``close`` returns the
    files written with their row counts."""

    def __init__(
        self,
        root: Path,
        keys: tuple[str, ...],
        open_file: OpenFile,
        name: Callable[[int], str],
        rows_per_file: int | None = None,
        *,
        make_directories: bool = True,
    ) -> None:
        self.root = root
        self._make_directories = make_directories  # False on object stores: no directories
        self.keys = keys
        self._open_file = open_file
        self._name = name  # file name for a partition's n-th file
        self._rows_per_file = rows_per_file
        self._partitions: dict[Key, _Partition] = {}
        self._open: OrderedDict[Key, None] = OrderedDict()  # least recently used first
        self._pending_bytes = 0
        self._rows: dict[Path, int] = {}  # every file written, and its rows

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        for key, rows in self._runs(batch):
            partition = self._partitions.get(key)
            if partition is None:
                partition = _Partition(self.root.joinpath(*self._directories(key)))
                self._partitions[key] = partition
            partition.pending.append(rows)
            partition.pending_rows += rows.num_rows
            partition.pending_bytes += rows.nbytes
            self._pending_bytes += rows.nbytes
            if partition.pending_rows >= ROW_GROUP_ROWS:
                self._flush(key)
        while self._pending_bytes > BUFFER_BYTES:
            fullest = max(self._partitions, key=lambda k: self._partitions[k].pending_bytes)
            self._flush(fullest)

    def _runs(self, batch: pa.RecordBatch) -> list[tuple[Key, pa.RecordBatch]]:
        """The batch cut into one run of rows per partition, rows in their order within it,
        without the key columns (the directory names hold them)."""
        table = pa.Table.from_batches([batch])
        order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in self.keys])
        keys = table.select(list(self.keys)).take(order)
        changed = np.zeros(max(len(keys) - 1, 0), dtype=bool)
        for name in self.keys:
            changed |= _changes(keys.column(name))
        starts = [0, *(np.flatnonzero(changed) + 1).tolist()]
        labels = [_labels(keys.column(k).take(pa.array(starts))) for k in self.keys]
        data = table.drop_columns(list(self.keys))
        ends = [*starts[1:], len(keys)]
        runs: list[tuple[Key, pa.RecordBatch]] = []
        for number, (start, end) in enumerate(zip(starts, ends, strict=True)):
            key: Key = tuple(column[number] for column in labels)
            # A run of its own (take copies): a slice would keep the whole batch in memory
            # while it waits, and the budget would count only the slice.
            rows = data.take(order.slice(start, end - start))
            runs.extend((key, piece) for piece in rows.to_batches())
        return runs

    def _directories(self, key: Key) -> list[str]:
        return [f"{name}={value}" for name, value in zip(self.keys, key, strict=True)]

    def _flush(self, key: Key) -> None:
        partition = self._partitions[key]
        if not partition.pending:
            return
        rows = pa.Table.from_batches(partition.pending)  # its chunks, not joined: one copy
        self._pending_bytes -= partition.pending_bytes
        partition.pending, partition.pending_rows, partition.pending_bytes = [], 0, 0
        offset = 0
        while offset < rows.num_rows:
            room = rows.num_rows
            if self._rows_per_file is not None:
                # A new file has room for rows_per_file rows (file_rows is 0 until it opens).
                room = self._rows_per_file - partition.file_rows
                if room <= 0:
                    self._close(key)
                    continue
            piece = rows.slice(offset, room)
            self._file(key, piece).write(piece)
            partition.file_rows += piece.num_rows
            assert partition.path is not None
            self._rows[partition.path] += piece.num_rows
            offset += piece.num_rows

    def _file(self, key: Key, first: pa.Table) -> FileWriter:
        partition = self._partitions[key]
        if partition.file is None:
            if len(self._open) >= MAX_OPEN_FILES:
                self._close(next(iter(self._open)))
            if self._make_directories:
                partition.directory.mkdir(parents=True, exist_ok=True)
            path = partition.directory / self._name(partition.files)
            partition.file = self._open_file(path, first)
            partition.path = path
            partition.files += 1
            self._rows[path] = 0
        self._open[key] = None
        self._open.move_to_end(key)
        return partition.file

    def _close(self, key: Key) -> None:
        partition = self._partitions[key]
        if partition.file is not None:
            partition.file.close()
            partition.file = None
            partition.file_rows = 0
        self._open.pop(key, None)

    def close(self) -> list[tuple[Path, int]]:
        """Write what waits, close every file; the files written and their rows."""
        for key in list(self._partitions):
            self._flush(key)
        for key in list(self._open):
            self._close(key)
        return list(self._rows.items())

    def abandon(self) -> None:
        """Close the open files after a failure (the staging directory is removed anyway)."""
        for key in list(self._open):
            with contextlib.suppress(Exception):  # closing after a failure must not hide it
                self._close(key)


def _changes(column: pa.ChunkedArray) -> np.ndarray:
    """For sorted values: where each row differs from the one before (nulls equal nulls)."""
    if len(column) < 2:
        return np.zeros(0, dtype=bool)
    after, before = column.slice(1), column.slice(0, len(column) - 1)
    differ = pc.fill_null(pc.not_equal(after, before), False)
    one_null = pc.xor(pc.is_null(after), pc.is_null(before))
    return np.asarray(pc.or_(differ, one_null).to_numpy(zero_copy_only=False), dtype=bool)


def _labels(values: pa.ChunkedArray) -> list[str]:
    """Each value as its directory label: as text, percent-encoded like DuckDB's, NULL as
    Hive's default partition."""
    text = pc.cast(values, pa.string()).to_pylist()
    return [NULL_VALUE if v is None else urllib.parse.quote(v, safe="") for v in text]
