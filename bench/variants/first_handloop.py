"""first result, a hand-written pyarrow loop: from interpreter start to the first row of the first
batch of pq.ParquetFile.iter_batches through an identity function."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import pyarrow.parquet as pq

    def same(batch: Any) -> Any:
        return batch

    first = same(next(pq.ParquetFile(args.data).iter_batches(batch_size=10)))
    first = first.slice(0, 1).to_pylist()
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("first_result", "hand-loop", lambda: main(args))
