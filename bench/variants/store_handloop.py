"""object store, a hand-written pyarrow.fs loop: stream the input object's batches, apply the
UDF, stream the output object with pyarrow's multipart upload. What a careful engineer writes
without an engine."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    if args.lance:
        return to_lance(args)
    import pyarrow.parquet as pq

    source, target = benchlib.store_urls(args)
    fs = benchlib.store_filesystem()
    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch, fs.open_input_file(source.removeprefix("s3://")) as raw:
        reader = pq.ParquetFile(raw)
        writer = None
        out = fs.open_output_stream(target.removeprefix("s3://") + "part-0.parquet")
        try:
            for batch in reader.iter_batches(batch_size=args.batch_size):
                result = benchlib.overhead_udf(batch)
                if writer is None:
                    writer = pq.ParquetWriter(out, result.schema)
                writer.write_table(result)
        finally:
            if writer is not None:
                writer.close()
            out.close()
    return {"rows": benchlib.checked_store_rows(target, args.rows), "seconds": watch.seconds}


def to_lance(args: argparse.Namespace) -> dict[str, object]:
    """``--lance``: the UDF's batches streamed into ``lance.write_dataset`` (one commit)."""
    import itertools

    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = benchlib.store_urls(args)[0]
    target = benchlib.lance_target(args)
    fs = benchlib.store_filesystem()
    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch, fs.open_input_file(source.removeprefix("s3://")) as raw:
        batches = (
            benchlib.overhead_udf(batch)
            for batch in pq.ParquetFile(raw).iter_batches(batch_size=args.batch_size)
        )
        first = next(batches)
        streamed = (b for t in itertools.chain([first], batches) for b in t.to_batches())
        lance.write_dataset(
            pa.RecordBatchReader.from_batches(first.schema, streamed),
            target,
            storage_options=benchlib.lance_options(),
        )
    return {"rows": benchlib.checked_store_rows(target, args.rows), "seconds": watch.seconds}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    benchlib.lance_argument(parser)
    args = parser.parse_args()
    benchlib.run(benchlib.store_workload(args), "hand-loop", lambda: main(args))
