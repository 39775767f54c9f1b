"""first result, DuckDB: from interpreter start to the first row of read_parquet through an
identity Arrow UDF registered with create_function."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import duckdb

    con = duckdb.connect()
    con.create_function("same", lambda x: x, ["BIGINT"], "BIGINT", type="arrow")
    first = con.execute("SELECT same(id), text FROM read_parquet(?)", [args.data]).fetchone()
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("first_result", "duckdb", lambda: main(args))
