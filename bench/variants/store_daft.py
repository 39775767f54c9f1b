"""object store, Daft: read_parquet("s3://...") -> the overhead UDF (``@daft.func.batch``) ->
write_parquet("s3://..."), with Daft's own S3 client pointed at the local server."""

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
    with benchlib.Stopwatch() as watch:
        df = daft.read_parquet(source, io_config=io)
        df.select(udf(df["id"], df["text"])).write_parquet(target, io_config=io)
    rows = benchlib.checked_store_rows(target, args.rows)
    return {"rows": rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("store", "daft", lambda: main(args))
