"""object store, Daft: read_parquet("s3://...") -> the overhead UDF (``@daft.func.batch``) ->
write_parquet("s3://...") (``--lance``: write_lance("s3://....lance")), with Daft's own S3
client pointed at the local server."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft
    import pyarrow as pa

    source, target = benchlib.store_urls(args)
    io = benchlib.daft_store_config()
    both = daft.DataType.struct({"x": daft.DataType.int64(), "n": daft.DataType.int64()})

    @daft.func.batch(return_dtype=both, unnest=True, batch_size=args.batch_size)
    def udf(ids: daft.Series, texts: daft.Series) -> pa.StructArray:
        result = benchlib.overhead_udf(pa.table({"id": ids.to_arrow(), "text": texts.to_arrow()}))
        columns = [result[name].combine_chunks() for name in ("x", "n")]
        return pa.StructArray.from_arrays(columns, names=["x", "n"])

    benchlib.warm_overhead_udf()
    if args.lance:
        target = benchlib.lance_target(args)
        import daft_lance  # noqa: F401  -- (what write_lance imports, before the clock)
    with benchlib.Stopwatch() as watch:
        df = daft.read_parquet(source, io_config=io)
        mapped = df.select(udf(df["id"], df["text"]))
        if args.lance:
            mapped.write_lance(target, io_config=benchlib.daft_store_config(lance=True))
        else:
            mapped.write_parquet(target, io_config=io)
    rows = benchlib.checked_store_rows(target, args.rows)
    return {"rows": rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    benchlib.lance_argument(parser)
    args = parser.parse_args()
    benchlib.run(benchlib.store_workload(args), "daft", lambda: main(args))
