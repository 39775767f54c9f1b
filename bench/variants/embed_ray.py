"""embed, Ray Data: read_parquet -> map_batches(a callable class, concurrency=1, batch_size=64,
batch_format="pyarrow") -> write_parquet, on ``ray.init(num_cpus=2)``."""

from __future__ import annotations

import argparse

import benchlib

Embedder = benchlib.Embedder


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    startup = benchlib.start_ray()
    with benchlib.Stopwatch() as watch:
        ray.data.read_parquet(args.data).map_batches(
            Embedder, batch_size=args.batch_size, batch_format="pyarrow", concurrency=1
        ).write_parquet(args.out)
    ray.shutdown()
    return {"rows": args.rows, "seconds": watch.seconds, "startup_s": startup}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("embed", "ray-data", lambda: main(args))
