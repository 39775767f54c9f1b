"""The product page's (seeds/002) examples, run as written, with CPU for CUDA."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import vane

pytest.importorskip("sentence_transformers")


class SentenceEmbedder:
    def __init__(self) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(
            "sentence-transformers/all-MiniLM-L6-v2",
            device="cpu",
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch.column("id").to_pylist()
        texts = batch.column("text").to_pylist()
        vectors = self.model.encode(texts, convert_to_numpy=True).tolist()
        return pa.table(
            {
                "id": ids,
                "embedding": vectors,
            }
        )


# Batches of 64 over two actors, the last one short: 160 texts exercise what 300 did (the
# page's example has no size), with half of the encoding in each worker and in the check.
TEXTS = [
    f"review {i}: {'great' if i % 3 else 'awful'} product, would {i % 5} stars" for i in range(160)
]


@pytest.mark.slow
def test_sentence_embedder_equals_calling_encode_directly(tmp_path):
    from sentence_transformers import SentenceTransformer

    rel = vane.from_pydict({"id": list(range(len(TEXTS))), "text": TEXTS})
    embedded = rel.map_batches(
        SentenceEmbedder,
        schema={
            "id": "BIGINT",
            "embedding": "FLOAT[]",
        },
        batch_size=64,
        execution_backend="subprocess_actor",
        concurrency=2,
    )
    result = embedded.write_parquet(tmp_path / "embedded")
    assert result.rows == len(TEXTS)

    back = vane.read_parquet(tmp_path / "embedded").to_arrow()
    assert back.schema.field("embedding").type == pa.list_(pa.float32())
    assert back["id"].to_pylist() == list(range(len(TEXTS)))
    got = np.array(back["embedding"].to_pylist(), dtype=np.float32)

    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    direct = np.vstack(
        [model.encode(TEXTS[i : i + 64], convert_to_numpy=True) for i in range(0, len(TEXTS), 64)]
    )
    assert got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, direct, rtol=0, atol=1e-5)
