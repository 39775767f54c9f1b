"""embed, Daft: read_parquet -> a ``@daft.cls`` (max_concurrency=1: one model) whose
``@daft.method.batch`` encodes 64 texts at a time -> write_parquet (id, embedding)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft

    vector = daft.DataType.embedding(daft.DataType.float32(), benchlib.EMBED_DIM)

    @daft.cls(max_concurrency=1)
    class Embedder:
        def __init__(self) -> None:
            self.model = benchlib.load_embedder()

        @daft.method.batch(return_dtype=vector, batch_size=args.batch_size)
        def __call__(self, texts: daft.Series) -> object:
            return benchlib.embed_texts(self.model, texts.to_pylist(), len(texts))

    with benchlib.Stopwatch() as watch:
        df = daft.read_parquet(args.data)
        embed = Embedder()
        df.select(df["id"], embed(df["text"]).alias("embedding")).write_parquet(args.out)
    return {"rows": args.rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    args = benchlib.parser(__doc__).parse_args()
    benchlib.run("embed", "daft", lambda: main(args))
