"""overhead, Daft: read_parquet -> a ``@daft.func.batch`` UDF (the same function, both columns as
one struct, unnested) -> write_parquet."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft
    import pyarrow as pa

    both = daft.DataType.struct({"x": daft.DataType.int64(), "n": daft.DataType.int64()})

    @daft.func.batch(return_dtype=both, unnest=True, batch_size=args.batch_size)
    def udf(ids: daft.Series, texts: daft.Series) -> pa.StructArray:
        result = benchlib.overhead_udf(pa.table({"id": ids.to_arrow(), "text": texts.to_arrow()}))
        columns = [result[name].combine_chunks() for name in ("x", "n")]
        return pa.StructArray.from_arrays(columns, names=["x", "n"])

    benchlib.warm_overhead_udf()
    with benchlib.Stopwatch() as watch:
        df = daft.read_parquet(args.data)
        df.select(udf(df["id"], df["text"])).write_parquet(args.out)
    return {"rows": args.rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("overhead", "daft", lambda: main(args))
