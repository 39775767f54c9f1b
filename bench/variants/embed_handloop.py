"""embed, a hand-written loop: load the model, then for each batch of the Parquet file encode the
texts and write (id, embedding). The physical limit of the machine for this model. ``--first``:
the seconds to the first batch's rows, model load included (first_rows)."""

from __future__ import annotations

import argparse
import os

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import pyarrow.parquet as pq

    os.makedirs(args.out)
    rows = 0
    with benchlib.Stopwatch() as watch:
        model = benchlib.load_embedder()
        source = pq.ParquetFile(args.data)
        writer = None
        for batch in source.iter_batches(batch_size=args.batch_size):
            vectors = benchlib.embed_texts(model, batch["text"].to_pylist(), args.batch_size)
            result = benchlib.embedding_table(batch["id"], vectors)
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(args.out, "part-0.parquet"), result.schema)
            writer.write_table(result)
            rows += result.num_rows
            if args.first:
                break
        if writer is not None:
            writer.close()
    return {"rows": rows, "seconds": watch.seconds}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    benchlib.first_arguments(parser)
    args = parser.parse_args()
    benchlib.run("first_rows" if args.first else "embed", "hand-loop", lambda: main(args))
