"""The jobs the kill matrix (``test_kill_matrix.py``) kills: each one a resumable write run as
its own process, so that ``kill -9`` finds it wherever it is (in a model call, saving an
answer, writing a row group, committing).

    python -m tests.integration.kill_jobs embed OUT SINK CALLS MODEL ROWS BATCH CONCURRENCY
    python -m tests.integration.kill_jobs prompt OUT SINK BASE_URL ROWS BATCH

``embed`` embeds ``ROWS`` sentences with ``MODEL``: ``numpy`` (a deterministic embedding of
each row's id that costs ``COST_S`` a batch, as a model does, so that a kill finds calls
running) or ``minilm`` (all-MiniLM-L6-v2 from the installed package, through
sentence-transformers). Each call appends its batch's first id to ``CALLS`` and syncs it
before it computes, so a kill cannot lose a count. ``prompt`` asks vane's OpenAI-compatible
test server at ``BASE_URL`` about each row, which counts the requests itself. ``SINK`` is
``parquet`` (a folder) or ``lance``. With ``KILL_JOB_PART_BYTES`` set, a folder's parts are
closed (and kept for a rerun) every that many bytes of rows, so that kills land in their
protocol too.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

import vane

DIM = 32  # the numpy embedding's width
COST_S = 0.05  # what a batch of the numpy embedding costs, spent waiting as on an accelerator


def sentences(rows: int) -> vane.Relation:
    return vane.range(rows).with_column(
        "text", "'sentence ' || id || ' is about a cat that sat on the mat'"
    )


def numpy_vectors(ids: np.ndarray) -> np.ndarray:
    """The numpy model's answer for ``ids``: each row's vector depends on its id alone."""
    angles = np.outer(ids.astype(np.float64) + 1.0, np.arange(1, DIM + 1)) / 997.0
    return np.sin(angles).astype(np.float32)


def log_call(calls: str, batch: pa.Table) -> None:
    """One line per call (the batch's first id), synced before the answer leaves: a kill
    cannot lose a count. (The resume tests' jobs call it too.)"""
    with open(calls, "a") as log:
        log.write(f"{batch['id'][0].as_py()}\n")
        log.flush()
        os.fsync(log.fileno())


def _vectors(ids: Any, vectors: np.ndarray) -> pa.Table:
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    return pa.table(
        {"id": ids, "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])}
    )


class NumpyEmbedder:
    def __init__(self, calls: str) -> None:
        self.calls = calls

    def __call__(self, batch: pa.Table) -> pa.Table:
        log_call(self.calls, batch)
        time.sleep(COST_S)
        return _vectors(batch["id"], numpy_vectors(batch["id"].to_numpy()))


class MiniLM:
    def __init__(self, calls: str) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        from tests.models import minilm_path

        torch.set_num_threads(1)
        self.calls = calls
        self.model = SentenceTransformer(minilm_path(), device="cpu")

    def __call__(self, batch: pa.Table) -> pa.Table:
        log_call(self.calls, batch)
        texts = batch["text"].to_pylist()
        return _vectors(batch["id"], self.model.encode(texts, batch_size=len(texts)))


def embed_job(calls: str, model: str, rows: int, batch: int, concurrency: int) -> vane.Relation:
    embedder = {"numpy": NumpyEmbedder, "minilm": MiniLM}[model]
    dim = DIM if model == "numpy" else 384
    return sentences(rows).map_batches(
        embedder,
        schema={"id": "BIGINT", "embedding": f"FLOAT[{dim}]"},
        batch_size=batch,
        concurrency=concurrency,
        fn_constructor_args=(calls,),
    )


def prompt_job(base_url: str, rows: int, batch: int) -> vane.Relation:
    return sentences(rows).prompt(
        "text", base_url=base_url, api_key="k", model="m", batch_size=batch
    )


def write(rel: vane.Relation, out: str, sink: str) -> None:
    result = getattr(rel, f"write_{sink}")(out, resume=True)
    print("resumed", result.steps[0].rows_resumed, flush=True)


def main(argv: list[str]) -> None:
    vane.configure(progress=False)
    if os.environ.get("KILL_JOB_PART_BYTES"):  # parts closed every few batches (io/parts.py)
        from vane.io import parts

        parts.PART_BYTES = int(os.environ["KILL_JOB_PART_BYTES"])
    job, out, sink = argv[:3]
    if job == "embed":
        calls, model, rows, batch, concurrency = argv[3:8]
        rel = embed_job(calls, model, int(rows), int(batch), int(concurrency))
    else:
        base_url, rows, batch = argv[3:6]
        rel = prompt_job(base_url, int(rows), int(batch))
    write(rel, out, sink)


if __name__ == "__main__":
    main(sys.argv[1:])
