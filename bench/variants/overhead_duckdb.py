"""overhead, DuckDB alone: the same projection in SQL, Parquet to Parquet. The floor: no Python
touches a row."""

from __future__ import annotations

import argparse
import os

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import duckdb

    os.makedirs(args.out)
    source = args.data.replace("'", "''")
    target = os.path.join(args.out, "part-0.parquet").replace("'", "''")
    with benchlib.Stopwatch() as watch:
        con = duckdb.connect()
        con.execute(
            f"COPY (SELECT id * 2 AS x, length(text) AS n FROM read_parquet('{source}')) "
            f"TO '{target}' (FORMAT parquet)"
        )
        con.close()
    return {"rows": args.rows, "seconds": watch.seconds, "duckdb": duckdb.__version__}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("overhead", "duckdb-sql", lambda: main(args))
