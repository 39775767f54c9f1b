"""Relational work inside Ray tasks: reading a share of a file source with the worker's own
embedded DuckDB (a chain of row-local SQL steps on each block is ``BlockSql``, in
``vane.execution.row_steps``). It gives exactly what the local runner's DuckDB gives for those
rows."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from vane import _engine
from vane.backend.compile import scan_checked
from vane.plan.nodes import FileScan


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


def read_files(scan: FileScan, files: Iterable[str]) -> pa.Table:
    """The rows of ``files``, a share of ``scan``'s, read as the scan reads them.

    The share is checked against the scan's stamps before it is bound: that check is the
    listing that tells this process what each object is (its size, time and ETag), so that
    binding it and reading it ask the store nothing more, and its reads name the ETags the
    driver's plan was built on."""
    files = tuple(files)
    changed = scan.vanished(files)
    if changed is not None:
        raise changed
    share = dataclasses.replace(scan, files=files)
    cursor = _engine.cursor()
    try:
        table: pa.Table = scan_checked(share, cursor).to_arrow_table()
    finally:
        cursor.close()
    return conform_columns(table, scan.schema)


def file_datasource(scan: FileScan) -> Any:
    """A Ray Data datasource that reads ``scan``'s files in parallel tasks, a few files each,
    with DuckDB and the scan's own options."""
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
                metadata = BlockMetadata(
                    num_rows=None,
                    size_bytes=sum(_size(f) for f in share) or None,
                    exec_stats=None,
                    input_files=share,
                )
                tasks.append(ReadTask(functools.partial(_read_share, scan, share), metadata))
            return tasks

    def _size(path: str) -> int:
        if scan.storage is not None:  # an object: its size as its listing gave it
            return (scan.stamps or {}).get(path, (0, 0, 0, 0))[2]
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    return FileScanDatasource()  # type: ignore[no-untyped-call]


def _read_share(scan: FileScan, share: tuple[str, ...]) -> list[pa.Table]:
    return [read_files(scan, share)]


def _share(files: list[str], index: int, groups: int) -> list[str]:
    """The ``index``-th of ``groups`` contiguous runs of ``files``: contiguous, so that blocks
    come in the files' order and rows keep the order the local runner gives."""
    size, extra = divmod(len(files), groups)
    start = index * size + min(index, extra)
    return files[start : start + size + (1 if index < extra else 0)]
