"""first result, Daft: from interpreter start to the first row of read_parquet through an identity
``@daft.func.batch`` UDF. ``--store``: the
same from the object the driver serves on its S3 endpoint (the store_first workload)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft

    @daft.func.batch(return_dtype=daft.DataType.int64())
    def same(ids: daft.Series) -> daft.Series:
        return ids

    if args.store:
        df = daft.read_parquet(benchlib.store_urls(args)[0], io_config=benchlib.daft_store_config())
    else:
        df = daft.read_parquet(args.data)
    first = next(iter(df.select(same(df["id"]), df["text"]).iter_rows()))
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.store_parser(__doc__).parse_args()
    benchlib.run(benchlib.first_workload(args), "daft", lambda: main(args))
