"""planning, vane: seconds to build and optimize a plan, nothing run.

``--what steps``: a 30-step pipeline over ``vane.range`` (with_column, filter, select and
map_batches steps, ten of each kind's turn), built and optimized (``explain(optimized=True)``).
``--what folder``: ``read_parquet`` of a folder of many small files (``--data``), a filter and a
projection, optimized: what listing the files and reading their footers costs.

Each is timed five times in one process after a first, untimed build (imports, DuckDB's
start), and the median is the run's figure: the cost a user pays for each plan of a session.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import benchlib

STEPS = 30
TIMES = 5


def passthrough(batch: Any) -> Any:
    return batch


def thirty_steps(vane: Any) -> Callable[[], object]:
    def build() -> object:
        rel = vane.range(1_000).with_column("text", "'row ' || id")
        for i in range(STEPS // 3):
            rel = rel.with_column(f"c{i}", f"id * {i}")
            rel = rel.filter(f"c{i} >= 0")
            if i % 2 == 0:
                rel = rel.map_batches(passthrough, schema=rel.schema)
            else:
                rel = rel.select(*rel.columns)
        return rel.explain(optimized=True)

    return build


def folder(vane: Any, path: str) -> Callable[[], object]:
    def build() -> object:
        return vane.read_parquet(path).filter("id > 0").select("text").explain(optimized=True)

    return build


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane()
    vane.configure(progress=False)
    build = thirty_steps(vane) if args.what == "steps" else folder(vane, args.data)
    build()  # imports, DuckDB's start, the first parse: a session pays them once
    times = []
    for _ in range(TIMES):
        started = time.perf_counter()
        build()
        times.append(time.perf_counter() - started)
    return {"rows": args.rows, "seconds": statistics.median(times), "times": times}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--what", choices=["steps", "folder"], required=True)
    args = parser.parse_args()
    benchlib.run("planning", f"vane-{args.what}", lambda: main(args))
