"""A result kept to be read many times: Arrow batches in memory up to a byte budget, then a
temporary Parquet file.

``Relation.materialize()`` keeps its result in one, and an action spools a subplan that two
parts of the plan read (a self-join over a model's output, say) so the model runs once and both
sides see the same answers. Parquet keeps every type exactly (pyarrow stores the Arrow schema
beside the data) and compresses, so a spilled result costs less disk than memory. The file is
deleted when the spool is closed or garbage-collected, or at interpreter exit.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from vane._text import counted
from vane.config import get_config

if TYPE_CHECKING:
    import pyarrow.parquet as pq


class Spool:
    """Write batches with ``append``, then ``finish``; then read them any number of times."""

    def __init__(self, schema: pa.Schema, *, budget: int | None = None) -> None:
        config = get_config()
        self.schema = schema
        self._budget = config.memory_budget if budget is None else budget
        self._batches: list[pa.RecordBatch] = []
        self._directory: Path | None = None
        self._writer: pq.ParquetWriter | None = None  # once spilled
        self._finished = False
        self.rows = 0
        self.nbytes = 0  # in memory; once spilled, what was written
        self._cleanup = weakref.finalize(self, _remove, None)

    @classmethod
    def collect(cls, reader: pa.RecordBatchReader, *, budget: int | None = None) -> Spool:
        """Everything ``reader`` yields, kept."""
        spool = cls(reader.schema, budget=budget)
        try:
            for batch in reader:
                spool.append(batch)
        except BaseException:
            spool.close()
            raise
        spool.finish()
        return spool

    @property
    def spilled(self) -> bool:
        return self._directory is not None

    @property
    def path(self) -> Path | None:
        return self._directory / "part-0.parquet" if self._directory else None

    def append(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        if self._writer is not None:
            self._writer.write_batch(batch)
            return
        self._batches.append(batch)
        if self.nbytes > self._budget:
            self._spill()

    def _spill(self) -> None:
        import pyarrow.parquet as pq

        directory = Path(tempfile.mkdtemp(prefix="vane-spool-", dir=get_config().spill_directory))
        self._directory = directory
        self._cleanup.detach()
        self._cleanup = weakref.finalize(self, _remove, directory)
        self._writer = pq.ParquetWriter(directory / "part-0.parquet", self.schema)
        for batch in self._batches:
            self._writer.write_batch(batch)
        self._batches = []

    def finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._finished = True

    def reader(self, batch_size: int | None = None) -> pa.RecordBatchReader:
        """A new stream over every row kept, in the order appended."""
        if not self._finished:
            raise RuntimeError("a spool is read after finish()")
        return pa.RecordBatchReader.from_batches(self.schema, self._batches_out(batch_size))

    def _batches_out(self, batch_size: int | None) -> Iterator[pa.RecordBatch]:
        if self.path is None:
            yield from self._batches
            return
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.path) as file:
            for batch in file.iter_batches(batch_size=batch_size or get_config().batch_size):
                yield batch if batch.schema.equals(self.schema) else batch.cast(self.schema)

    def close(self) -> None:
        """Free the memory and delete the file now rather than at garbage collection."""
        self._batches = []
        self._cleanup()

    def describe(self) -> str:
        where = f"spilled to {self.path}" if self.spilled else "in memory"
        return f"{counted(self.rows, 'row')}, {self.nbytes / 1e6:,.1f} MB {where}"


def _remove(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
