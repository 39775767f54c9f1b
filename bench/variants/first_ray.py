"""first result, Ray Data: from interpreter start (ray.init included: Ray needs it) to the first
row of read_parquet -> map_batches(identity). ``--store``: the
same from the object the driver serves on its S3 endpoint (the store_first workload)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    benchlib.start_ray()
    if args.store:
        source = benchlib.store_urls(args)[0].removeprefix("s3://")
        ds = ray.data.read_parquet(source, filesystem=benchlib.store_filesystem())
    else:
        ds = ray.data.read_parquet(args.data)
    ds = ds.map_batches(lambda b: b, batch_format="pyarrow")
    first = ds.take(1)
    seconds = benchlib.since_process_start()
    ray.shutdown()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.store_parser(__doc__).parse_args()
    benchlib.run(benchlib.first_workload(args), "ray-data", lambda: main(args))
