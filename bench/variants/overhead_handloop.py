"""overhead, a hand-written pyarrow loop: read batches, apply the UDF, write them. What a careful
engineer writes without an engine."""

from __future__ import annotations

import argparse
import os

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import pyarrow.parquet as pq

    os.makedirs(args.out)
    rows = 0
    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch:
        source = pq.ParquetFile(args.data)
        writer = None
        for batch in source.iter_batches(batch_size=args.batch_size):
            result = benchlib.overhead_udf(batch)
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(args.out, "part-0.parquet"), result.schema)
            writer.write_table(result)
            rows += result.num_rows
        if writer is not None:
            writer.close()
    return {"rows": rows, "seconds": watch.seconds}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("overhead", "hand-loop", lambda: main(args))
