"""Relational work inside Ray tasks: reading a share of a file source, and running a chain of
row-local SQL steps (select, filter, with_column, drop, rename) on each block with the worker's
own embedded DuckDB. Both give exactly what the local runner's DuckDB gives for those rows."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vane import _engine
from vane.execution.lowering import Scannable, lower
from vane.plan.nodes import Cursor, FileScan, PlanNode, Relation, Source
from vane.plan.traverse import with_inputs


@dataclass(frozen=True, eq=False)
class BlockInput(Source):
    """Stands for "the block at hand" at the bottom of a chain of steps shipped to a task."""

    block_schema: pa.Schema
    current: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._set_schema(self.block_schema)

    def to_duckdb(self, cursor: Cursor) -> Relation:
        return cursor.from_arrow(self.current["table"])

    def describe(self) -> str:
        return "Block"


class _NoStreams:
    """Lowering inside a task: there is no UDF step and no shared subplan below a chain."""

    def udf_reader(self, node: Any) -> pa.RecordBatchReader:
        raise AssertionError("a row-local chain holds no UDF step")

    def spooled(self, node: PlanNode) -> Scannable | None:
        return None


def reroot(chain: list[PlanNode], schema: pa.Schema) -> tuple[PlanNode, BlockInput]:
    """``chain`` (bottom step first, each reading the one before) rebuilt on a ``BlockInput``
    of ``schema``: what a task needs, without the sources below."""
    bottom = BlockInput(schema)
    node: PlanNode = bottom
    for step in chain:
        node = with_inputs(step, (node,))
    return node, bottom


class BlockSql:
    """Ray Data's function for a chain of row-local SQL steps: one block in, one block out."""

    def __init__(self, top: PlanNode, bottom: BlockInput) -> None:
        self.top = top
        self.bottom = bottom

    def __call__(self, block: pa.Table) -> pa.Table:
        cursor = _engine.cursor()
        try:
            self.bottom.current["table"] = block
            table: pa.Table = lower(self.top, cursor, _NoStreams()).to_arrow_table()
        finally:
            self.bottom.current.clear()
            cursor.close()
        return table


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
    """The rows of ``files``, a share of ``scan``'s, read as the scan reads them."""
    share = dataclasses.replace(scan, files=tuple(files))
    cursor = _engine.cursor()
    try:
        table: pa.Table = share.to_duckdb(cursor).to_arrow_table()
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
