"""first result, vane: from interpreter start to the first row of read_parquet -> map_batches
(identity, thread backend). ``--store``: the
same from the object the driver serves on its S3 endpoint (the store_first workload)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import vane

    vane.configure(progress=False)
    source = benchlib.store_urls(args)[0] if args.store else args.data
    rel = vane.read_parquet(source).map_batches(
        lambda batch: batch, schema={"id": "BIGINT", "text": "VARCHAR"}
    )
    first = next(iter(rel.iter_batches(10)))
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first.slice(0, 1).to_pylist())


if __name__ == "__main__":
    args = benchlib.store_parser(__doc__).parse_args()
    benchlib.run(benchlib.first_workload(args), "vane", lambda: main(args))
