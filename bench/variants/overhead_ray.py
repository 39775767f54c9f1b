"""overhead, Ray Data: read_parquet -> map_batches(the same function, batch_format="pyarrow") ->
write_parquet, on ``ray.init(num_cpus=2)``. ``seconds`` leaves ray.init out (``startup_s``)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    startup = benchlib.start_ray()
    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch:
        ray.data.read_parquet(args.data).map_batches(
            benchlib.overhead_udf, batch_size=args.batch_size, batch_format="pyarrow"
        ).write_parquet(args.out)
    ray.shutdown()
    return {"rows": args.rows, "seconds": watch.seconds, "startup_s": startup}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("overhead", "ray-data", lambda: main(args))
