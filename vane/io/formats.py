"""Writers of one output file each, fed Arrow tables in order.

Parquet and CSV use pyarrow's streaming writers; JSON lines are rendered by DuckDB's ``to_json``
(one object per row) and written as bytes. Measured on 13M rows: pyarrow's Parquet writer without
a dictionary on high-cardinality columns is as fast as DuckDB's ``COPY`` and keeps memory flat and
rows in order, where an ordered parallel ``COPY`` buffers more as the input grows.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

# A column gets a Parquet dictionary when its first batch has at most this share of distinct
# values: dictionaries shrink labels and categories, but building one for unique strings (ids,
# free text) costs about 3x the write time for nothing.
_DICTIONARY_MAX_DISTINCT = 0.5
# ... counted on at most this many of its first rows: the share shows on a sample, and counting
# distinct values over a whole 65,536-row batch took 25-80 ms per file (8,192 rows: ~2.5 ms).
_DICTIONARY_SAMPLE_ROWS = 8_192


class FileWriter(Protocol):
    """``write`` takes a table of rows as the pipeline gathered them (its columns may have many
    chunks): a Parquet file makes one row group of each without joining the chunks first,
    which would hold the rows twice."""

    def write(self, rows: pa.Table) -> None: ...
    def close(self) -> None: ...


def _dictionary_columns(first: pa.Table) -> list[str]:
    sample = first.slice(0, _DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name, column in zip(sample.schema.names, sample.columns, strict=True):
        kind = column.type
        if not (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_integer(kind)
            or pa.types.is_binary(kind)
        ):
            continue
        distinct = pc.count_distinct(column).as_py()
        if len(column) and distinct <= _DICTIONARY_MAX_DISTINCT * len(column):
            chosen.append(name)
    return chosen


class ParquetFile:
    def __init__(self, path: Path | BinaryIO, first: pa.Table) -> None:
        self._writer = pq.ParquetWriter(
            path, first.schema, compression="snappy", use_dictionary=_dictionary_columns(first)
        )

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows:
            self._writer.write_table(rows, row_group_size=rows.num_rows)

    def close(self) -> None:
        self._writer.close()


class CsvFile:
    def __init__(self, path: Path | BinaryIO, first: pa.Table) -> None:
        self._writer = pacsv.CSVWriter(path, first.schema)

    def write(self, rows: pa.Table) -> None:
        self._writer.write_table(rows)

    def close(self) -> None:
        self._writer.close()


class JsonFile:
    """Newline-delimited JSON: DuckDB's ``to_json`` renders each row, in order."""

    def __init__(
        self, path: Path | BinaryIO, first: pa.Table, cursor: duckdb.DuckDBPyConnection
    ) -> None:
        # A stream given (stdout) stays open, as pyarrow's writers leave it.
        self._owned = isinstance(path, Path)
        self._file: BinaryIO = open(path, "wb") if isinstance(path, Path) else path  # noqa: SIM115
        self._cursor = cursor

    def write(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        relation = self._cursor.from_arrow(rows).query(
            "t", "SELECT to_json(t)::VARCHAR AS line FROM t AS t"
        )
        assert relation is not None  # a SELECT always gives a relation
        rendered = relation.to_arrow_table().column("line").combine_chunks()
        lines = pc.binary_join_element_wise(rendered, pa.scalar(""), "\n")
        # The rendered lines are contiguous in the array's data buffer: write that span at once.
        offsets = lines.buffers()[1]
        start, end = pa.Array.from_buffers(
            pa.int32(), len(lines) + 1, [None, offsets], offset=lines.offset
        ).to_numpy()[[0, -1]]
        self._file.write(memoryview(lines.buffers()[2])[start:end])

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()
