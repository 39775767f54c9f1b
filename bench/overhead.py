"""Engine overhead: a no-op UDF over 10M rows against DuckDB streaming the same rows.
Run: .venv/bin/python bench/overhead.py"""

from __future__ import annotations

import statistics
import time

import pyarrow as pa

import vane

ROWS = 10_000_000


def noop(batch: pa.Table) -> pa.Table:
    return batch


def timed(rel: vane.Relation) -> float:
    started = time.perf_counter()
    assert sum(b.num_rows for b in rel.iter_batches(65_536)) == ROWS
    return time.perf_counter() - started


def main() -> None:
    vane.configure(progress=False)
    base = vane.range(ROWS).select("id", "id * 2 AS x")
    duckdb_s = statistics.median(timed(base) for _ in range(3))
    print(f"{ROWS:,} rows (id, x BIGINT); DuckDB streaming alone: {duckdb_s:.2f} s")
    print(f"{'backend':<18}{'batch_size':>11}{'seconds':>9}{'x DuckDB':>10}")
    for backend in ("thread", "subprocess_actor"):
        for batch_size in (8_192, 65_536):
            rel = base.map_batches(
                noop,
                schema={"id": "BIGINT", "x": "BIGINT"},
                batch_size=batch_size,
                execution_backend=backend,
            )
            seconds = statistics.median(timed(rel) for _ in range(3))
            print(f"{backend:<18}{batch_size:>11,}{seconds:>9.2f}{seconds / duckdb_s:>10.1f}")


if __name__ == "__main__":
    main()
