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
