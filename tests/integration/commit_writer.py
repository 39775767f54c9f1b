"""The writer of test_commit_faults: rows ``start..start+rows-1`` (and ``k = id % 5``) written
to a path. The tests call ``write_rows`` in their own process for the writes they do not kill,
and run this module in a process of its own for those they hold and kill.
Run: ``python -m tests.integration.commit_writer PATH FMT MODE START ROWS PARTITIONED PER_FILE``."""

from __future__ import annotations

import sys

import vane


def write_rows(
    path: str, fmt: str, mode: str, *, start: int, rows: int, partitioned: bool, per_file: int
) -> None:
    rel = vane.range(rows).select(f"id + {start} AS id", "id % 5 AS k")
    options: dict[str, object] = {"mode": mode}
    if partitioned:
        options["partition_by"] = "k"
    elif not path.endswith((".parquet", ".csv", ".jsonl")):
        options["rows_per_file"] = max(1, rows // 4)
    if per_file:
        options["rows_per_file"] = per_file
    getattr(rel, "write_" + fmt)(path, **options)


if __name__ == "__main__":
    vane.configure(progress=False)
    path, fmt, mode, start, rows, partitioned, per_file = sys.argv[1:8]
    write_rows(
        path,
        fmt,
        mode,
        start=int(start),
        rows=int(rows),
        partitioned=partitioned == "1",
        per_file=int(per_file),
    )
