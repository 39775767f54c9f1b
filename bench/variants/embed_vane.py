"""embed, vane: read_parquet -> map_batches(Embedder class) -> write_parquet on one backend
(``--backend thread`` or ``subprocess_actor``). The model loads once, inside the actor."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


class Embedder:
    def __init__(self) -> None:
        self.model = benchlib.load_embedder()

    def __call__(self, batch: Any) -> Any:
        vectors = benchlib.embed_texts(self.model, batch["text"].to_pylist(), len(batch))
        return benchlib.embedding_table(batch["id"], vectors)


def main(args: argparse.Namespace) -> dict[str, object]:
    import vane

    vane.configure(progress=False)
    with benchlib.Stopwatch() as watch:
        result = (
            vane.read_parquet(args.data)
            .map_batches(
                Embedder,
                schema={"id": "BIGINT", "embedding": f"FLOAT[{benchlib.EMBED_DIM}]"},
                batch_size=args.batch_size,
                execution_backend=args.backend,
            )
            .write_parquet(args.out + "/")
        )
    return {"rows": result.rows, "seconds": watch.seconds}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--backend", required=True, choices=["thread", "subprocess_actor"])
    args = parser.parse_args()
    benchlib.run("embed", f"vane-{args.backend}", lambda: main(args))
