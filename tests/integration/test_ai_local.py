"""AI functions on local models: the packaged all-MiniLM-L6-v2 through sentence-transformers, and
tiny random-weight GPT-2 and CLIP models through transformers, each equal to calling the model
directly; vLLM's mapping onto the plan, and vLLM itself where a GPU and vllm are present."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import vane
from tests.tiny_models import png, tiny_clip, tiny_gpt2
from vane import col
from vane.errors import ConfigurationError

pytest.importorskip("transformers")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["the dog barks at the cat", "slow-cooked onions and garlic", "a kitten sleeps", None]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"gpt2": str(tiny_gpt2(root / "gpt2")), "clip": str(tiny_clip(root / "clip"))}


def texts() -> vane.Relation:
    return vane.from_pydict({"id": [1, 2, 3, 4], "text": TEXTS})


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_sentence_transformers_equals_encode(backend):
    from sentence_transformers import SentenceTransformer

    out = texts().embed_text("text", execution_backend=backend, batch_size=2)
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    rows = out.to_pylist()
    assert rows[3]["embedding"] is None  # a null text costs nothing and stays null
    direct = SentenceTransformer(MINILM, device="cpu").encode(TEXTS[:3])
    got = np.array([r["embedding"] for r in rows[:3]], dtype=np.float32)
    np.testing.assert_allclose(got, direct, rtol=0, atol=1e-5)
    unit = texts().embed_text("text", normalize=True, dimensions=64).to_pylist()[0]["embedding"]
    assert len(unit) == 64 and abs(np.linalg.norm(unit) - 1) < 1e-5


def test_classify_text_by_embedding_similarity():
    out = texts().classify_text("text", ["animals", "cooking"])
    assert [r["label"] for r in out.to_pylist()] == ["animals", "cooking", "animals", None]
    expression = vane.ai.classify_text(col("text"), ["animals", "cooking"]).alias("kind")
    assert texts().select("id", expression).filter("kind = 'cooking'").to_pylist() == [
        {"id": 2, "kind": "cooking"}
    ]


def test_transformers_generation_is_batched_and_equals_one_by_one(models):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rel = vane.from_pydict({"q": ["the quick brown fox", "a small", "vane runs models over"]})
    rows = rel.prompt(
        "q", provider="transformers", model=models["gpt2"], max_tokens=6, batch_size=3
    ).to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(models["gpt2"])
    model = AutoModelForCausalLM.from_pretrained(models["gpt2"]).eval()
    for row in rows:  # each alone, no padding: batching with left padding changes nothing
        ids = tokenizer(row["q"], return_tensors="pt")
        with torch.no_grad():
            output = model.generate(**ids, max_new_tokens=6, do_sample=False,
                                    pad_token_id=tokenizer.eos_token_id)  # fmt: skip
        expected = tokenizer.decode(
            output[0, ids["input_ids"].shape[1] :], skip_special_tokens=True
        )
        assert row["response"] == expected


def test_transformers_mean_pooled_embeddings(models):
    import torch
    from transformers import AutoModel, AutoTokenizer

    out = texts().embed_text("text", provider="transformers", model=models["gpt2"])
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), 32)
    rows = out.to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(models["gpt2"])
    model = AutoModel.from_pretrained(models["gpt2"]).eval()
    with torch.no_grad():
        hidden = model(**tokenizer(TEXTS[0], return_tensors="pt")).last_hidden_state
    np.testing.assert_allclose(rows[0]["embedding"], hidden[0].mean(0).numpy(), atol=1e-5)


def test_clip_image_embeddings_from_bytes_and_paths(models, tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoModel, CLIPImageProcessor

    images = [png(1), png(2)]
    paths = []
    for number, data in enumerate(images):
        path = tmp_path / f"{number}.png"
        path.write_bytes(data)
        paths.append(str(path))
    rel = vane.from_pydict({"image": images, "path": paths})
    out = rel.embed_image("image", model=models["clip"]).embed_image(
        "path", model=models["clip"], output_column="from_path"
    )
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), 16)
    rows = out.to_pylist()
    assert [r["embedding"] for r in rows] == [r["from_path"] for r in rows]
    processor = CLIPImageProcessor.from_pretrained(models["clip"])
    model = AutoModel.from_pretrained(models["clip"]).eval()
    import io

    pictures = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    with torch.no_grad():
        features = model.get_image_features(**processor(images=pictures, return_tensors="pt"))
    if not isinstance(features, torch.Tensor):
        features = features.pooler_output
    np.testing.assert_allclose(
        np.array([r["embedding"] for r in rows]), features.numpy(), atol=1e-5
    )


def test_local_models_cannot_promise_a_schema_and_missing_models_are_clear(models):
    with pytest.raises(ConfigurationError, match="cannot hold a model to a JSON schema"):
        texts().prompt(
            "text",
            provider="transformers",
            model=models["gpt2"],
            return_format={"type": "object", "properties": {"a": {"type": "string"}}},
        )
    with pytest.raises(ConfigurationError, match="neither a directory nor in the Hugging Face"):
        texts().embed_text("text", model="nobody/no-such-model")
    with pytest.raises(ConfigurationError, match="needs model="):
        texts().prompt("text", provider="transformers")


# ---- vLLM -----------------------------------------------------------------------------------


def test_vllm_maps_gpus_per_actor_onto_the_step_and_the_engine():
    out = texts().prompt(
        "text",
        provider="vllm",
        model="Qwen/Qwen3-0.6B",
        execution_backend="ray_actor",
        batch_size=32,
        concurrency=2,
        gpus_per_actor=1,
        max_model_len=2048,
        temperature=0.0,
    )
    plan = out.explain(optimized=True)
    assert "prompt[vllm Qwen/Qwen3-0.6B](text)" in plan
    assert "backend=ray_actor" in plan and "gpus=1" in plan
    assert "batch_size=32" in plan and "concurrency=2" in plan
    (call,) = out.plan.expressions()[0].udf_calls()  # type: ignore[attr-defined]
    descriptor = call.udf.owner.args[0]
    assert descriptor.tensor_parallel_size == 1 and descriptor.resources() == {"gpus": 1}
    assert descriptor.engine == {"max_model_len": 2048}
    assert descriptor.generation == {"temperature": 0.0}


@pytest.mark.gpu
def test_vllm_generates_on_a_gpu():
    pytest.importorskip("vllm", reason="vllm is not installed")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU, and this machine has none")
    out = texts().prompt("text", provider="vllm", model="facebook/opt-125m", max_tokens=8)
    assert all(isinstance(r["response"], str) for r in out.to_pylist()[:3])
