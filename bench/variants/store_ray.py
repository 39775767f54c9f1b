"""object store, Ray Data: read_parquet("s3://...") -> map_batches(the overhead UDF) ->
write_parquet("s3://..."), with pyarrow's S3 filesystem on the local server, on
``ray.init(num_cpus=2)``. ``seconds`` leaves ray.init out (``startup_s``)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    source, target = benchlib.store_urls(args)
    startup = benchlib.start_ray()
    fs = benchlib.store_filesystem()
    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch:
        ray.data.read_parquet(source.removeprefix("s3://"), filesystem=fs).map_batches(
            benchlib.overhead_udf, batch_size=args.batch_size, batch_format="pyarrow"
        ).write_parquet(target.removeprefix("s3://"), filesystem=fs)
    ray.shutdown()
    rows = benchlib.checked_store_rows(target, args.rows)
    return {"rows": rows, "seconds": watch.seconds, "startup_s": startup}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("store", "ray-data", lambda: main(args))
