"""first result, Ray Data: from interpreter start (ray.init included: Ray needs it) to the first
row of read_parquet -> map_batches(identity)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    benchlib.start_ray()
    ds = ray.data.read_parquet(args.data).map_batches(lambda b: b, batch_format="pyarrow")
    first = ds.take(1)
    seconds = benchlib.since_process_start()
    ray.shutdown()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("first_result", "ray-data", lambda: main(args))
