"""A chain of row-local SQL steps (select, filter, with_column, drop, rename) run on one batch
at a time with its own DuckDB cursor: what a Ray task does to each block, and what the local
runner does to a UDF step's batches when the action streams them (``streamed``, which also
takes a ``limit``), so that nothing is read ahead of what the reader asks for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vane import _engine
from vane.backend.compile import scan
from vane.backend.connection import Cursor, Relation
from vane.backend.lowering import lower
from vane.plan.nodes import Limit, PlanNode, Source
from vane.plan.traverse import with_inputs


@dataclass(frozen=True, eq=False)
class BlockInput(Source):
    """Stands for "the block at hand" (a Ray block, a UDF step's batch) at the bottom of a chain
    of steps."""

    block_schema: pa.Schema
    current: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._set_schema(self.block_schema)

    def describe(self) -> str:
        return "Block"


@scan.register
def _(node: BlockInput, cursor: Cursor) -> Relation:
    return cursor.from_arrow(node.current["table"])


class _NoStreams:
    """Lowering a chain on its own: there is no UDF step and no shared subplan below it."""

    def udf_reader(self, node: Any) -> pa.RecordBatchReader:
        raise AssertionError("a row-local chain holds no UDF step")

    def spooled(self, node: PlanNode) -> Source | None:
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
    """A chain of row-local SQL steps as a function: one block in, one block out."""

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


def streamed(
    chain: list[PlanNode], schema: pa.Schema, blocks: Iterable[pa.Table]
) -> Iterator[pa.Table]:
    """``chain`` (bottom step first: row-local steps and limits) run on ``blocks`` of
    ``schema`` as each is read: runs of row-local steps with DuckDB on each block, a limit by
    counting rows, its stream ending once it has them (no block past them is read)."""
    stream: Iterable[pa.Table] = blocks
    run: list[PlanNode] = []
    for step in [*chain, None]:
        if step is not None and not isinstance(step, Limit):
            run.append(step)
            continue
        if run:
            stream = map(BlockSql(*reroot(run, schema)), stream)
            schema, run = run[-1].schema, []
        if isinstance(step, Limit):
            stream = _limited(stream, step.n, step.offset)
    return iter(stream)


def _limited(blocks: Iterable[pa.Table], n: int, offset: int) -> Iterator[pa.Table]:
    """The ``n`` rows of ``blocks`` after the first ``offset``, read no further than them."""
    if n <= 0:
        return
    for block in blocks:
        skipped = min(offset, block.num_rows)
        offset -= skipped
        kept = block.slice(skipped, n)
        n -= kept.num_rows
        if kept.num_rows:
            yield kept
        if n <= 0:
            return
