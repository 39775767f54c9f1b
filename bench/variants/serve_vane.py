"""serve, vane: the embed pipeline with four CPU-side actors and the model either (a) inside each
actor (``--mode actors``: ``map_batches(Embedder, concurrency=4)`` on subprocess actors, four
copies of the model) or (b) in one server that they share (``--mode server``:
``vane.ai.serve(function=benchlib.embedding_server)`` and ``embed_text(server=...,
concurrency=4)``, one copy). The server's start (its model load) is inside the timed part, as
each actor's is in (a)."""

from __future__ import annotations

import argparse

import benchlib

ACTORS = 4


Embedder = benchlib.Embedder


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane()
    from vane.ai import serve

    vane.configure(progress=False)
    schema = {"id": "BIGINT", "embedding": f"FLOAT[{benchlib.EMBED_DIM}]"}
    with benchlib.Stopwatch() as watch:
        rel = vane.read_parquet(args.data)
        if args.mode == "actors":
            result = rel.map_batches(
                Embedder,
                schema=schema,
                batch_size=args.batch_size,
                execution_backend="subprocess_actor",
                concurrency=ACTORS,
            ).write_parquet(args.out + "/")
        else:
            with serve(function=benchlib.embedding_server, health="/health") as server:
                result = (
                    rel.embed_text(
                        "text",
                        server=server,
                        model="all-MiniLM-L6-v2",
                        batch_size=args.batch_size,
                        concurrency=ACTORS,
                    )
                    .select("id", "embedding")
                    .write_parquet(args.out + "/")
                )
    return {"rows": result.rows, "seconds": watch.seconds, "actors": ACTORS}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--mode", required=True, choices=["actors", "server"])
    args = parser.parse_args()
    benchlib.run("serve", f"vane-{args.mode}", lambda: main(args))
