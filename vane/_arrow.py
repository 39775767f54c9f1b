"""Small Arrow helpers shared by the io and execution layers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa


class Rechunker:
    """Takes rows from a stream of record batches in runs of a chosen length.

    Batches are cut with zero-copy ``slice``; rows are never copied or buffered beyond the one
    batch being cut.
    """

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._pending: pa.RecordBatch | None = None

    def _next_nonempty(self) -> pa.RecordBatch | None:
        if self._pending is not None and self._pending.num_rows:
            return self._pending
        for batch in self._batches:
            if batch.num_rows:
                self._pending = batch
                return batch
        self._pending = None
        return None

    @property
    def exhausted(self) -> bool:
        return self._next_nonempty() is None

    def take(self, rows: int) -> Iterator[pa.RecordBatch]:
        """Yield batches that together hold up to ``rows`` rows."""
        remaining = rows
        while remaining > 0:
            batch = self._next_nonempty()
            if batch is None:
                return
            if batch.num_rows <= remaining:
                self._pending = None
                remaining -= batch.num_rows
                yield batch
            else:
                self._pending = batch.slice(remaining)
                yield batch.slice(0, remaining)
                remaining = 0


def exact_batches(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """``batches`` re-cut into batches of exactly ``size`` rows (the last may be shorter), as
    they are read: zero-copy slices, joined at the seams."""
    rechunker = Rechunker(iter(batches))
    while not rechunker.exhausted:
        pieces = list(rechunker.take(size))
        yield pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def coalesced(
    batches: Iterable[pa.RecordBatch], max_rows: int, max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """``batches`` in order, consecutive small ones joined into one of at most ``max_rows``
    rows and ``max_bytes`` bytes (a batch already past either bound passes as it is). Memory
    holds at most one joined batch's worth of rows, whatever the input's size."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        if pending and (rows + batch.num_rows > max_rows or size + batch.nbytes > max_bytes):
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows, size = [], 0, 0
        pending.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
