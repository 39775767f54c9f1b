"""Models over images: classify_image zero-shot with a tiny random-weight CLIP (built from
transformers' config classes, its tokenizer trained on the spot), and prompt with image parts
against vane's OpenAI-compatible test server."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import vane
from tests.images import pattern, png_bytes
from tests.tiny_models import tiny_clip_with_tokenizer
from vane import functions as F
from vane.ai import embed_image
from vane.errors import ConfigurationError
from vane.testing import OpenAIServer
from vane.testing.server import Behaviour, Scripted, label_for_images, vector_for

pytest.importorskip("transformers")
LABELS = ["cat", "dog", "car"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_clip_with_tokenizer(tmp_path_factory.mktemp("clip")))


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("photos")
    paths = []
    for seed in range(6):
        path = folder / f"{seed}.png"
        path.write_bytes(png_bytes(pattern(20 + seed, 30, seed=seed)))
        paths.append(str(path))
    return paths


def _by_hand(clip: str, paths: list[str]) -> list[str]:
    """CLIP's zero-shot choice computed with transformers directly."""
    import torch
    from PIL import Image
    from transformers import AutoModel, AutoProcessor

    processor = AutoProcessor.from_pretrained(clip)
    model = AutoModel.from_pretrained(clip).eval()
    texts = processor.tokenizer(
        [f"a photo of a {label}" for label in LABELS], padding=True, return_tensors="pt"
    )
    texts.pop("token_type_ids", None)
    pictures = [Image.open(p).convert("RGB") for p in paths]
    with torch.no_grad():
        text = model.get_text_features(**texts)
        image = model.get_image_features(**processor(images=pictures, return_tensors="pt"))
    text = text if isinstance(text, torch.Tensor) else text.pooler_output
    image = image if isinstance(image, torch.Tensor) else image.pooler_output
    text = text / text.norm(dim=1, keepdim=True)
    image = image / image.norm(dim=1, keepdim=True)
    return [LABELS[int(i)] for i in (image @ text.T).argmax(dim=1)]


def test_classify_image_is_clips_zero_shot_choice_for_paths_bytes_and_pixels(clip, photos):
    expected = _by_hand(clip, photos)
    rel = vane.from_pydict({"path": photos}).select(
        "path",
        F.read_bytes("path").alias("data"),
        F.decode_image("path").alias("pixels"),
    )
    out = (
        rel.classify_image("path", LABELS, model=clip, output_column="from_path")
        .classify_image("data", LABELS, model=clip, output_column="from_bytes")
        .classify_image("pixels", LABELS, model=clip, output_column="from_pixels")
        .to_pylist()
    )
    assert [r["from_path"] for r in out] == expected
    assert [r["from_bytes"] for r in out] == expected
    assert [r["from_pixels"] for r in out] == expected  # PNG-encoded in the worker: lossless
    with pytest.raises(ConfigurationError, match="list of label strings"):
        rel.classify_image("path", "cat", model=clip)


@pytest.fixture(scope="module")
def server():
    started = OpenAIServer().start()
    yield started
    started.stop()


def test_prompt_sends_images_as_data_uris_and_urls_as_they_are(server, photos):
    server.reset()
    rel = vane.from_pydict(
        {
            "question": ["what is this?", "and this?", "no picture"],
            "path": [photos[0], photos[1], None],
            "url": ["https://example.com/a.png", None, None],
        }
    )
    out = rel.prompt(
        "question",
        images=["path", "url"],
        model="m",
        base_url=server.base_url,
        api_key="k",
    ).to_pylist()
    assert [r["response"] for r in out] == [
        "answer to: what is this? (with 2 images)",
        "answer to: and this? (with 1 image)",
        "answer to: no picture",
    ]
    sent = sorted(server.image_urls)
    assert "https://example.com/a.png" in sent
    data = [u for u in sent if u.startswith("data:")]
    assert sorted(base64.b64decode(u.split(",", 1)[1]) for u in data) == sorted(
        Path(p).read_bytes() for p in photos[:2]
    )
    assert all(u.startswith("data:image/png;base64,") for u in data)


def test_decoded_images_are_sent_as_png_of_the_same_pixels(server, photos):
    server.reset()
    from PIL import Image

    rel = vane.from_pydict({"q": ["look"], "path": [photos[2]]}).with_column(
        "small", F.resize_image("path", 8, 4)
    )
    rel.prompt("q", images="small", model="m", base_url=server.base_url, api_key="k").count()
    (uri,) = server.image_urls
    import io

    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))
    assert pixels.shape == (4, 8, 3)


def test_prompt_sends_files_as_file_parts_with_their_media_type(server, tmp_path):
    server.reset()
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(b"%PDF-1.4 a tiny document")
    notes = tmp_path / "notes.txt"
    notes.write_text("remember the milk")
    rel = vane.from_pydict({"q": ["summarize", "and this"], "doc": [str(pdf), str(notes)]})
    out = rel.prompt(
        "q", files=F.file("doc"), model="m", base_url=server.base_url, api_key="k"
    ).to_pylist()
    assert [r["response"] for r in out] == [
        "answer to: summarize (with 1 file)",
        "answer to: and this (with 1 file)",
    ]
    sent = {f["filename"]: f["file_data"] for f in server.files}
    assert sent["invoice.pdf"].startswith("data:application/pdf;base64,")
    assert base64.b64decode(sent["invoice.pdf"].split(",", 1)[1]) == pdf.read_bytes()
    assert sent["notes.txt"].startswith("data:text/plain;base64,")


def _data_uri(path: str) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_embed_image_sends_each_image_to_the_servers_embeddings_as_vllm_takes_them(
    server, photos, backend
):
    server.reset()
    rel = vane.from_pydict({"path": [photos[0], None, photos[1]], "url": ["https://x/a.png"] * 3})
    out = rel.select(
        embed_image(
            "path",
            provider="openai",
            model="an-embedding-model",
            base_url=server.base_url,
            api_key="k",
            dimensions=6,
            instruction="Represent the given image.",
            execution_backend=backend,
        ).alias("vector"),
        embed_image(
            "url", provider="openai", model="m", base_url=server.base_url, api_key="k"
        ).alias("from_url"),
    )
    assert out.schema.field("vector").type == pa.list_(pa.float32(), 6)
    rows = out.to_pylist()
    text = "Represent the given image."
    for row, path in zip(rows, [photos[0], None, photos[1]], strict=True):
        if path is None:
            assert row["vector"] is None
            continue
        expected = vector_for(text + _data_uri(path), 6)
        assert np.allclose(row["vector"], expected)  # each image its own request, its own vector
    assert np.allclose(rows[0]["from_url"], vector_for("https://x/a.png", 8))  # a URL as it is
    assert server.by_text[text] == 2 and server.requests == 5  # a null image is not sent


def test_embed_image_fails_only_the_row_whose_request_fails(server, photos):
    server.reset(Behaviour(scripted={_data_uri(photos[1]): Scripted({"oops": 1}, status=400)}))
    rel = vane.from_pydict({"path": photos[:3]})
    rows = rel.embed_image(
        "path",
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key="k",
        on_error="null",
        error_column="error",
    ).to_pylist()
    assert [r["embedding"] is None for r in rows] == [False, True, False]
    assert "HTTP 400" in rows[1]["error"]


def test_classify_image_asks_a_vision_chat_model_to_pick_a_label(server, photos):
    server.reset()
    rel = vane.from_pydict({"path": photos})
    rows = rel.classify_image(
        "path", LABELS, provider="openai", model="a-vision-model",
        base_url=server.base_url, api_key="k",
    ).to_pylist()  # fmt: skip
    assert [r["label"] for r in rows] == [label_for_images(LABELS, [_data_uri(p)]) for p in photos]
    assert len(set(server.image_urls)) == len(photos)


def test_classify_image_answer_that_is_not_a_label_fails_its_row(server, photos):
    question = "Which of the labels fits this image?"
    wrong = {"choices": [{"message": {"role": "assistant", "content": '{"label": "horse"}'}}]}
    server.reset(Behaviour(scripted={question: Scripted(wrong, times=1)}))
    rel = vane.from_pydict({"path": photos[:3]})
    rows = rel.classify_image(
        "path", LABELS, provider="openai", model="m", base_url=server.base_url, api_key="k",
        on_error="null", error_column="error", max_concurrent_requests=1,
    ).to_pylist()  # fmt: skip
    failed = [r for r in rows if r["label"] is None]
    assert len(failed) == 1 and "'horse'" in failed[0]["error"] and "cat" in failed[0]["error"]
    server.reset(Behaviour(scripted={question: Scripted(wrong, times=1)}))
    strict = rel.classify_image(
        "path", LABELS, provider="openai", model="m", base_url=server.base_url, api_key="k"
    )
    with pytest.raises(vane.errors.VaneError, match="horse"):
        strict.to_pylist()
