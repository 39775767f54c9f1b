"""Relational work inside Ray tasks: reading a share of a file source with the worker's own
embedded DuckDB (a chain of row-local SQL steps on each block is ``BlockSql``, in
``vane.execution.row_steps``). It gives exactly what the local runner's DuckDB gives for those
rows."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from vane import _engine
from vane.backend.compile import scan_checked
from vane.plan.nodes import FileScan

# A part of a share's rows: (offset, count), the count None for all the rest.
Rows = tuple[int, int | None] | None

# Ray Data hands a UDF step's answers on per task of its actors, and a task answers a whole
# input bundle (its outputs are merged into blocks of up to ``target_max_block_size``), so the
# stream's first rows wait for the first input block to go through the model: a 20,000-row
# file read as one block that Ray Data splits for parallelism in 4 is 5,000 rows, 79 batches of
# 64 (issue 31). So the first share of a file source is read slow-start: a block of one batch
# of the UDF step that reads it (``first_rows``), then two, doubling up to 64, then all the
# rest in one read. An actor's task answers a bundle of at least one batch, so the
# first rows come after one batch, and the 7 small tasks cost nothing on a large input, whose
# tasks stay large. The sizes are fixed: a rerun cuts the same batches, which a resumable
# write finds again by their contents (``execution/resume.py``).
#   Every block is then cut to at most 64 batches (``largest_block``, in the read's own tasks:
# ``lowering.py``): Ray Data would
# split one file's rows into as many blocks as it wants tasks, and now sees 8 read tasks where
# it saw one, so the rest would be one block, whose actor task calls the model on one batch at
# a time, none queued behind it (``PLAIN_CALLS_PER_ACTOR`` in ``lowering.py``): 100,000 rows
# through a 2 ms function took twice as long so.
FIRST_ROWS = 64  # the first block's rows when no UDF step reads the source directly
_SMALL_BLOCKS = 7  # 1 .. 64 batches: 127 in all
_ALL_ROWS = 2**63 - 1


def conform_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A share of a multi-file source as the whole source's schema: columns by name, a column
    the share lacks as nulls, narrower types widened (the whole's types are the union's)."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            column = table.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


# A share this process checked lately, by its files and the stamps the plan has for them, and
# when: the slow start reads one share in several tasks, often in one worker process, and the
# check's listing is good for as long as the storage layer keeps what it told DuckDB
# (``storage._INFO_SECONDS``; a read after that names the ETag it expects all the same).
_CHECKED_FOR_S = 20.0
_checked: dict[tuple[tuple[str, object], ...], float] = {}
_checked_lock = threading.Lock()


def _check_share(scan: FileScan, files: tuple[str, ...]) -> None:
    """Raise if ``files`` changed since the plan listed them, unless this process saw them
    unchanged in the last ``_CHECKED_FOR_S`` seconds."""
    stamps = scan.stamps or {}
    key = tuple((path, stamps.get(path)) for path in files)
    now = time.monotonic()
    with _checked_lock:
        if now - _checked.get(key, -_CHECKED_FOR_S) < _CHECKED_FOR_S:
            return
    changed = scan.vanished(files)
    if changed is not None:
        raise changed
    with _checked_lock:
        _checked[key] = now
        for old in [k for k, t in _checked.items() if now - t >= _CHECKED_FOR_S]:
            del _checked[old]


def read_files(scan: FileScan, files: Iterable[str], rows: Rows = None) -> pa.Table:
    """The rows of ``files``, a share of ``scan``'s, read as the scan reads them; ``rows``: only
    those from the ``(offset, count)`` one on (``count`` ``None``: to the end), in the files'
    order (DuckDB keeps the order rows are read in: ``preserve_insertion_order``).

    The share is checked against the scan's stamps before it is bound: that check is the
    listing that tells this process what each object is (its size, time and ETag), so that
    binding it and reading it ask the store nothing more, and its reads name the ETags the
    driver's plan was built on."""
    files = tuple(files)
    _check_share(scan, files)
    share = dataclasses.replace(scan, files=files)
    cursor = _engine.cursor()
    try:
        relation = scan_checked(share, cursor)
        if rows is not None:
            offset, count = rows
            relation = relation.limit(_ALL_ROWS if count is None else count, offset=offset)
        table: pa.Table = relation.to_arrow_table()
    finally:
        cursor.close()
    return conform_columns(table, scan.schema)


def file_datasource(scan: FileScan, first_rows: int = FIRST_ROWS) -> Any:
    """A Ray Data datasource that reads ``scan``'s files in parallel tasks, a few files each,
    with DuckDB and the scan's own options; the first share slow-start, from a block of
    ``first_rows`` rows (a batch of the UDF step that reads it)."""
    import os

    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class FileScanDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return sum(_size(f) for f in scan.files) or None

        def get_read_tasks(
            self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
        ) -> list[Any]:
            files = list(scan.files)
            groups = max(1, min(parallelism, len(files)))
            tasks = []
            for i in range(groups):
                share = tuple(_share(files, i, groups))
                parts: list[Rows] = slow_start(first_rows) if i == 0 else [None]
                for rows in parts:
                    last = rows is None or rows[1] is None
                    metadata = BlockMetadata(
                        num_rows=None,
                        # (the small blocks' bytes are counted in the rest's)
                        size_bytes=(sum(_size(f) for f in share) or None) if last else 0,
                        exec_stats=None,
                        input_files=share if last else None,
                    )
                    read = functools.partial(_read_share, scan, share, rows)
                    tasks.append(ReadTask(read, metadata))
            return tasks

    def _size(path: str) -> int:
        if scan.storage is not None:  # an object: its size as its listing gave it
            return (scan.stamps or {}).get(path, (0, 0, 0, 0))[2]
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    return FileScanDatasource()  # type: ignore[no-untyped-call]


def slow_start(first_rows: int = FIRST_ROWS) -> list[Rows]:
    """The parts a source's first share is read in: small blocks, doubling, then the rest."""
    parts: list[Rows] = []
    offset = 0
    for i in range(_SMALL_BLOCKS):
        count = first_rows << i
        parts.append((offset, count))
        offset += count
    return [*parts, (offset, None)]


def largest_block(first_rows: int = FIRST_ROWS) -> int:
    """The rows of the largest block of a source read slow-start from ``first_rows``."""
    return first_rows << (_SMALL_BLOCKS - 1)


def _read_share(scan: FileScan, share: tuple[str, ...], rows: Rows) -> list[pa.Table]:
    return [read_files(scan, share, rows)]


def _share(files: list[str], index: int, groups: int) -> list[str]:
    """The ``index``-th of ``groups`` contiguous runs of ``files``: contiguous, so that blocks
    come in the files' order and rows keep the order the local runner gives."""
    size, extra = divmod(len(files), groups)
    start = index * size + min(index, extra)
    return files[start : start + size + (1 if index < extra else 0)]
