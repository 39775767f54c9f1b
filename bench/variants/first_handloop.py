"""first result, a hand-written pyarrow loop: from interpreter start to the first row of the first
batch of pq.ParquetFile.iter_batches through an identity function. ``--store``: the
same from the object the driver serves on its S3 endpoint (the store_first workload)."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import pyarrow.parquet as pq

    def same(batch: Any) -> Any:
        return batch

    source: Any = args.data
    if args.store:  # pyarrow's S3 filesystem on the object the driver serves
        source = benchlib.store_filesystem().open_input_file(
            benchlib.store_urls(args)[0].removeprefix("s3://")
        )
    first = same(next(pq.ParquetFile(source).iter_batches(batch_size=10)))
    first = first.slice(0, 1).to_pylist()
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.store_parser(__doc__).parse_args()
    benchlib.run(benchlib.first_workload(args), "hand-loop", lambda: main(args))
