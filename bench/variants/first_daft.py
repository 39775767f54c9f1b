"""first result, Daft: from interpreter start to the first row of read_parquet through an identity
``@daft.func.batch`` UDF."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft

    @daft.func.batch(return_dtype=daft.DataType.int64())
    def same(ids: daft.Series) -> daft.Series:
        return ids

    df = daft.read_parquet(args.data)
    first = next(iter(df.select(same(df["id"]), df["text"]).iter_rows()))
    seconds = benchlib.since_process_start()
    return benchlib.first_result(seconds, first)


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("first_result", "daft", lambda: main(args))
