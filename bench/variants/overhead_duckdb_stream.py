"""overhead, DuckDB streamed: the projection in SQL, its rows streamed out of DuckDB as Arrow
batches of 65,536 rows (with Parquet prefetching off, as vane sets it) and written by pyarrow's
Parquet writer. The read vane itself does, without the UDF: the memory workload's measure of
how much DuckDB's parallel, ordered streaming scan holds as the input grows."""

from __future__ import annotations

import argparse
import os

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import duckdb
    import pyarrow.parquet as pq

    os.makedirs(args.out)
    source = args.data.replace("'", "''")
    rows = 0
    with benchlib.Stopwatch() as watch:
        con = duckdb.connect()
        con.execute("SET GLOBAL disable_parquet_prefetching = true")
        reader = con.sql(
            f"SELECT id * 2 AS x, length(text) AS n FROM read_parquet('{source}')"
        ).to_arrow_reader(65_536)
        with pq.ParquetWriter(os.path.join(args.out, "part-0.parquet"), reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
        con.close()
    return {"rows": rows, "seconds": watch.seconds, "duckdb": duckdb.__version__}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("overhead", "duckdb-stream", lambda: main(args))
