"""Column UDFs in vane's actors against DuckDB's own Python UDFs (``create_function``), same
function, same rows, alternating, in one run: whether stateless functions should run inside
DuckDB instead (the expressions issue asks to measure it).

    .venv/bin/python bench/column_udf_duckdb.py [--rows 1000000] [--repetitions 3]

Prints one JSON line per measurement and a summary. The row function is ``str.upper`` per value
(DuckDB ``type="native"``), the batch function ``pyarrow.compute.utf8_upper`` on the whole
column (DuckDB ``type="arrow"``); both read an in-memory Arrow table and return every column
plus the new one as Arrow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

import vane
from vane import col


@vane.func
def shout(text: str) -> str:
    return text.upper()


@vane.func.batch(return_dtype="VARCHAR")
def shout_batch(text: pa.Array) -> pa.Array:
    return pc.utf8_upper(text)


def _upper(text: str) -> str:
    return text.upper()


def _upper_batch(text: pa.Array) -> pa.Array:
    return pc.utf8_upper(text)


def _vane(table: pa.Table, udf: object) -> float:
    started = time.perf_counter()
    vane.from_arrow(table).with_column("s", udf(col("text"))).to_arrow()  # type: ignore[operator]
    return time.perf_counter() - started


def _duckdb(table: pa.Table, kind: str) -> float:
    connection = duckdb.connect()
    if kind == "native":
        connection.create_function("shout", _upper, ["VARCHAR"], "VARCHAR", type="native")
    else:
        connection.create_function("shout", _upper_batch, ["VARCHAR"], "VARCHAR", type="arrow")
    started = time.perf_counter()
    connection.register("t", table)
    connection.sql("SELECT *, shout(text) AS s FROM t").to_arrow_table()
    seconds = time.perf_counter() - started
    connection.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    vane.configure(progress=False)
    table = pa.table(
        {
            "id": pa.array(range(args.rows)),
            "text": pa.array([f"text number {i}" for i in range(args.rows)]),
        }
    )
    variants = {
        "row: vane thread actor": lambda: _vane(table, shout),
        "row: duckdb native": lambda: _duckdb(table, "native"),
        "batch: vane thread actor": lambda: _vane(table, shout_batch),
        "batch: duckdb arrow": lambda: _duckdb(table, "arrow"),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repetitions):
        for name, run in variants.items():
            seconds = run()
            times[name].append(seconds)
            print(json.dumps({"variant": name, "rows": args.rows, "seconds": round(seconds, 3)}))
    for name, values in times.items():
        print(f"{name:28s} median {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()
