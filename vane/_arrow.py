"""Small Arrow helpers shared by the io and execution layers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa


def is_pandas(values: object) -> bool:
    return type(values).__module__.startswith("pandas")


def exact_array(values: Any, arrow_type: pa.DataType | None = None) -> pa.Array | pa.ChunkedArray:
    """``pa.array`` where only a null is null: NaN stays NaN, in lists, numpy arrays and pandas
    float columns alike. A numpy masked array's mask, pandas' ``NA`` and ``NaT`` are nulls. In a
    pandas column of Python objects, a NaN among values that are not floats (text, say) can
    only be pandas' missing-value marker, and is read as one."""
    try:
        return pa.array(values, type=arrow_type, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        if not (is_pandas(values) and str(getattr(values, "dtype", "")) == "object"):
            raise
    return pa.array(values, type=arrow_type, from_pandas=True)


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
        yield one_batch(list(rechunker.take(size)))


def gathered(
    batches: Iterable[pa.RecordBatch], in_hand: Callable[[], bool], max_rows: int
) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` in groups, as they are read: each group is a batch and those after it that
    are already in hand (``in_hand()``, asked after each batch: the next one will come without
    waiting), up to ``max_rows`` rows or a batch more. No group waits for a batch not yet
    produced; empty batches are dropped."""
    group: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows:
            group.append(batch)
            rows += batch.num_rows
        if group and (rows >= max_rows or not in_hand()):
            yield group
            group, rows = [], 0
    if group:
        yield group


def one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches`` (copied only when there are several)."""
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


# While a table gathers, its batches are joined into Arrow's memory about this many bytes at a
# time (see ``coalesced``).
JOIN_BYTES = 2**20


def coalesced(
    batches: Iterable[pa.RecordBatch], max_rows: int, max_bytes: int
) -> Iterator[pa.Table]:
    """``batches`` in order, consecutive small ones gathered into a table of at most
    ``max_rows`` rows and ``max_bytes`` bytes (a batch already past either bound is a table of
    its own); memory holds at most one table's worth of rows, whatever the input's size.

    While a table gathers, its small batches are joined (copied) into Arrow's memory pool about
    a megabyte at a time and then let go. A UDF's batches often live in memory the UDF's own
    library allocated (a model's output tensor, numpy): held for seconds among that library's
    short-lived allocations, they kept the C allocator's heap from being reused, and an
    embedding pipeline's memory grew by hundreds of megabytes over 20,000 rows where a loop
    writing each batch at once stayed flat. Each row is copied once, and the table is not joined
    again before it is written."""
    joined: list[pa.RecordBatch] = []  # copies, in Arrow's pool
    loose: list[pa.RecordBatch] = []  # batches as they came, until about JOIN_BYTES
    rows = size = loose_size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        if rows and (rows + batch.num_rows > max_rows or size + batch.nbytes > max_bytes):
            yield pa.Table.from_batches([*joined, *loose])
            joined, loose, rows, size, loose_size = [], [], 0, 0, 0
        loose.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        loose_size += batch.nbytes
        if loose_size >= JOIN_BYTES and len(loose) > 1:
            joined.append(pa.concat_batches(loose))
            loose, loose_size = [], 0
    if rows:
        yield pa.Table.from_batches([*joined, *loose])


def row_nbytes(data: pa.Table | pa.RecordBatch) -> Any:
    """Each row's bytes across its columns, as a numpy array: exact for fixed-width values,
    fixed-size lists of them (a decoded image), binary and text, and structs of these; any
    other column's bytes are shared evenly among its rows."""
    import numpy as np

    sizes = np.zeros(data.num_rows, dtype=np.int64)
    for column in data.columns:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        sizes += _array_row_bytes(array)
    return sizes


def _fixed_width(arrow_type: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_list(arrow_type):
        inner = _fixed_width(arrow_type.value_type)
        return None if inner is None else inner * arrow_type.list_size
    try:
        return int(arrow_type.bit_width + 7) // 8
    except ValueError:  # not a fixed-width type
        return None


def _array_row_bytes(array: pa.Array) -> Any:
    import numpy as np

    rows = len(array)
    if isinstance(array, pa.ExtensionArray):
        return _array_row_bytes(array.storage)
    kind = array.type
    width = _fixed_width(kind)
    if width is not None:
        return np.full(rows, width, dtype=np.int64)
    large = pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
    if large or pa.types.is_binary(kind) or pa.types.is_string(kind):
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)
        return np.diff(offsets[array.offset : array.offset + rows + 1]).astype(np.int64)
    if pa.types.is_struct(kind):
        sizes = np.zeros(rows, dtype=np.int64)
        for i in range(kind.num_fields):
            sizes += _array_row_bytes(array.field(i))
        return sizes
    return np.full(rows, array.nbytes // max(rows, 1), dtype=np.int64)


def split_by_bytes(table: pa.Table, limit: int) -> Iterator[pa.Table]:
    """``table`` in runs of consecutive rows of at most ``limit`` bytes each (zero-copy
    slices); a row larger than ``limit`` is a run of its own."""
    import numpy as np

    if not table.num_rows:
        return
    ends = np.cumsum(row_nbytes(table))
    start = 0
    while start < table.num_rows:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        stop = max(stop, start + 1)
        yield table.slice(start, stop - start)
        start = stop
