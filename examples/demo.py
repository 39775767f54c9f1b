"""The demo: a lazy pipeline over a generated table, streamed to Parquet with an atomic commit.

Run it with `make demo` (it sets up .venv first).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import vane


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="vane-demo-"))

    # 1. A source: a million generated product reviews, written once as Parquet files.
    reviews = vane.range(1_000_000).select(
        "id",
        "['books', 'games', 'tools', 'music'][id % 4 + 1] AS category",
        "(id * 7919 % 5) + 1 AS stars",
        "concat('review number ', id, ': ', "
        "['great', 'fine', 'awful', 'ok', 'superb'][id % 5 + 1]) AS text",
    )
    print(reviews.write_parquet(workdir / "reviews", rows_per_file=250_000))

    # 2. A lazy pipeline: nothing runs until write_parquet streams it.
    rel = (
        vane.read_parquet(workdir / "reviews")
        .filter("stars >= 4")
        .with_column("length", "length(text)")
        .join(
            vane.from_pydict({"category": ["books", "games"], "team": ["Ada", "Bo"]}),
            on="category",
            how="left",
        )
    )
    print("\nPlan:\n" + rel.explain())
    result = rel.write_parquet(workdir / "positive", mode="overwrite")
    print("\n" + str(result))

    # 3. Read it back and summarize with SQL.
    summary = (
        vane.read_parquet(workdir / "positive")
        .aggregate("count(*) AS reviews", "avg(length) AS mean_length", group_by="category")
        .order_by("category")
    )
    summary.show()


if __name__ == "__main__":
    main()
