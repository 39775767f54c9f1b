"""prompt(mode="batch") against the real OpenAI-compatible test server on 127.0.0.1, whose
Batch API counts a batch's time in polls (so nothing here waits on a clock): the answers are
live mode's, in row order, from one batch and no chat request; a process killed after its batch
was submitted leaves the batch id in the journal, and the rerun polls that batch instead of
submitting another; what a batch did not answer (failed items, expiry) is asked live for those
rows only, or fails them for on_error; answers land in the cache; batch tokens cost half."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from tests.ai_server import Behaviour, FakeServer, answer_for
from vane.errors import ConfigurationError, UDFError
from vane.udf.spec import Budget

pytest.importorskip("aiohttp")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def machine_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """The journal of a step without cache= goes to this machine's cache: a test's own."""
    monkeypatch.setenv("VANE_CACHE_DIR", str(tmp_path_factory.mktemp("vane-cache")))


@pytest.fixture(scope="module")
def running() -> FakeServer:
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture
def server(running: FakeServer) -> FakeServer:
    running.reset()
    return running


def ask(server: FakeServer, texts: list[str | None], **options: object) -> vane.Relation:
    rel = vane.from_pydict({"id": list(range(len(texts))), "text": texts})
    options.setdefault("mode", "batch")
    if options["mode"] == "batch":
        options.setdefault("batch_poll_interval", 0)
    return rel.prompt("text", model="m", base_url=server.base_url, api_key="k", **options)


def responses(rel: vane.Relation) -> list[str | None]:
    return [row["response"] for row in rel.to_pylist()]


def test_batch_answers_are_live_answers_in_row_order_from_one_batch(server, tmp_path):
    texts = [f"question {i}" for i in range(30)] + [None, "question 3"]
    live = responses(ask(server, texts, mode="live"))
    server.reset(Behaviour(batch_polls=3))
    result = ask(server, texts, cache=str(tmp_path)).write_parquet(str(tmp_path / "out"))
    assert [r["response"] for r in vane.read_parquet(str(tmp_path / "out")).to_pylist()] == live
    assert live[:2] == [answer_for("question 0"), answer_for("question 1")] and live[30] is None
    assert len(server.batches) == 1 and server.requests == 0
    assert sum(server.batch_items.values()) == 30  # "question 3" twice, sent once
    usage = next(iter(result.usage.values()))
    assert usage["batch_requests"] == 30 and usage["cache_hits"] == 1
    assert usage["batch_prompt_tokens"] == usage["prompt_tokens"] > 0
    assert "requests" not in usage  # no model request was sent live


def test_actors_in_processes_of_their_own_send_batches_too(server, tmp_path):
    texts = [f"q{i}" for i in range(8)]
    out = ask(
        server, texts, cache=str(tmp_path), batch_size=4, concurrency=2,
        execution_backend="subprocess_actor",
    )  # fmt: skip
    assert responses(out) == [answer_for(t) for t in texts]
    assert len(server.batches) == 2 and server.requests == 0
    assert _journaled(tmp_path) == 0


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(
        st.one_of(st.none(), st.text(alphabet=st.characters(codec="utf-8"), max_size=12)),
        max_size=12,
    )
)
def test_each_answer_finds_its_row_whatever_the_texts(running, texts):
    running.reset()
    expected = [None if t is None else answer_for(t) for t in texts]
    assert responses(ask(running, texts, batch_size=5)) == expected
    assert running.requests == 0
    assert all(n == 1 for n in running.batch_items.values())  # each distinct request once


def test_a_rerun_takes_every_answer_from_the_cache(server, tmp_path):
    texts = [f"q{i}" for i in range(10)]
    first = responses(ask(server, texts, cache=str(tmp_path)))
    batches = len(server.batches)
    result = ask(server, texts, cache=str(tmp_path)).write_parquet(str(tmp_path / "again"))
    assert len(server.batches) == batches == 1 and server.requests == 0
    assert next(iter(result.usage.values())) == {"cache_hits": 10}
    assert [r["response"] for r in vane.read_parquet(str(tmp_path / "again")).to_pylist()] == first
    # and live mode finds batch mode's answers: the same requests, the same cache keys
    assert responses(ask(server, texts, mode="live", cache=str(tmp_path))) == first
    assert server.requests == 0


def test_a_request_repeated_across_calls_is_sent_in_one_batch(server, tmp_path):
    """Calls of 2 rows, run at once by the actor: those after the first wait for its batch
    (or, once it is done, find its answers in the cache)."""
    server.reset(Behaviour(batch_polls=3))
    texts = ["a", "b"] * 10
    out = responses(ask(server, texts, batch_size=2, cache=str(tmp_path)))
    assert out == [answer_for(t) for t in texts]
    assert len(server.batches) == 1 and dict(server.batch_items) == {"a": 1, "b": 1}


def test_failed_items_are_asked_live_for_those_rows_only(server, tmp_path):
    texts = [f"q{i}" for i in range(12)]
    server.reset(Behaviour(batch_fail={"q3", "q7"}))
    result = ask(server, texts, cache=str(tmp_path)).write_parquet(str(tmp_path / "out"))
    out = vane.read_parquet(str(tmp_path / "out")).to_pylist()
    assert [r["response"] for r in out] == [answer_for(t) for t in texts]
    assert dict(server.by_prompt) == {"q3": 1, "q7": 1} and len(server.batches) == 1
    usage = next(iter(result.usage.values()))
    assert usage["requests"] == 2 and usage["batch_requests"] == 10


def test_an_expired_batch_leaves_its_unanswered_rows_to_live_requests(server):
    texts = [f"q{i}" for i in range(8)]
    server.reset(Behaviour(batch_expire_after=3))
    assert responses(ask(server, texts)) == [answer_for(t) for t in texts]
    assert server.batches["batch-1"]["status"] == "expired"
    assert set(server.batch_items) == {"q0", "q1", "q2"}
    assert set(server.by_prompt) == {f"q{i}" for i in range(3, 8)}


def test_batch_fallback_error_fails_the_unanswered_rows_for_on_error(server):
    server.reset(Behaviour(batch_fail={"b"}, batch_expire_after=2))
    with pytest.warns(UserWarning, match="kept 2 failing rows as nulls"):
        out = ask(
            server, ["a", "b", "c"], batch_fallback="error", on_error="null", error_column="why"
        ).to_pylist()
    assert server.requests == 0
    assert out[0]["response"] == answer_for("a") and out[0]["why"] is None
    assert out[1]["response"] is None and "injected batch item failure" in out[1]["why"]
    assert out[2]["response"] is None and "batch_expired" in out[2]["why"]


def _journaled(folder: Path, *, submitted: bool = True) -> int:
    """How many requests the journal holds: with their batch's id, or (``submitted=False``)
    only about to be submitted."""
    path = folder / "batches.sqlite"
    if not path.exists():
        return 0
    db = sqlite3.connect(path, timeout=30)
    which = "NOT NULL" if submitted else "NULL"
    try:
        query = f"SELECT count(*) FROM submitted WHERE batch_id IS {which}"
        return int(db.execute(query).fetchone()[0])
    except sqlite3.OperationalError:  # the table is not made yet
        return 0
    finally:
        db.close()


def _killed_while(server: FakeServer, texts: list[str], cache: Path, folder: Path, ready) -> None:
    """Run a batch prompt job in a process of its own, and SIGKILL it once ``ready()``."""
    script = textwrap.dedent(
        f"""
        import vane
        vane.configure(progress=False)
        rel = vane.from_pydict({{"text": {texts!r}}})
        rel.prompt("text", model="m", base_url={server.base_url!r}, api_key="k", mode="batch",
                   batch_poll_interval=0.05, cache={str(cache)!r}).write_parquet("out")
        """
    )
    with open(folder / "job.log", "wb") as log:
        job = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            give_up = time.monotonic() + 120  # a guard against a hang, not a measure
            while not ready() and job.poll() is None:
                assert time.monotonic() < give_up, "the job never got there"
                time.sleep(0.05)
            assert job.poll() is None, (folder / "job.log").read_text()
        finally:
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=60)


def test_a_job_killed_after_submitting_polls_its_batch_on_rerun(server, tmp_path):
    """A real process, SIGKILLed once the journal holds its batch's id: the rerun submits no
    batch and sends no request, and takes the answers from the batch the dead run submitted."""
    texts = [f"q{i}" for i in range(20)]
    server.reset(Behaviour(batch_polls=10**9))  # the batch runs until the test says
    cache = tmp_path / "cache"
    _killed_while(server, texts, cache, tmp_path, lambda: _journaled(cache) == len(texts))
    assert len(server.batches) == 1 and server.batches["batch-1"]["status"] == "in_progress"
    server.behaviour.batch_polls = 0  # the batch ends at its next poll

    out = responses(ask(server, texts, cache=str(cache)))
    assert out == [answer_for(t) for t in texts]
    assert len(server.batches) == 1 and server.requests == 0
    assert _journaled(cache) == _journaled(cache, submitted=False) == 0  # all answered


def test_a_job_killed_before_its_batch_id_came_back_finds_the_batch_on_rerun(server, tmp_path):
    """Killed after the server made the batch and before its reply came: the journal holds
    only the submission's token, and the rerun finds the batch by it in the server's list."""
    texts = [f"q{i}" for i in range(5)]
    server.reset(Behaviour(batch_polls=0, batch_create_stall=True))
    cache = tmp_path / "cache"
    _killed_while(server, texts, cache, tmp_path, lambda: len(server.batches) == 1)
    assert _journaled(cache, submitted=False) == len(texts) and _journaled(cache) == 0
    server.behaviour.batch_create_stall = False
    server.batches["batch-2"] = {  # a newer batch of someone else's, listed before it
        **server.batches["batch-1"],
        "id": "batch-2",
        "metadata": None,
        "polls": 0,
    }

    assert responses(ask(server, texts, cache=str(cache))) == [answer_for(t) for t in texts]
    assert len(server.batches) == 2 and server.requests == 0
    assert set(server.batch_items) == set(texts)  # batch-1's items, answered once


def test_a_batch_that_cannot_be_polled_fails_the_job_and_the_rerun_polls_it(server, tmp_path):
    """Never paid twice by falling back: a batch whose status cannot be read fails the job
    (its rows may still be answered), and keeps its id for the rerun."""
    texts = ["a", "b", "c"]
    server.reset(Behaviour(batch_polls=0, batch_retrieve_status=503))
    with pytest.raises(UDFError, match="HTTP 503"):
        ask(server, texts, cache=str(tmp_path), max_retries=0).to_pylist()
    assert len(server.batches) == 1 and server.requests == 0
    assert _journaled(tmp_path) == len(texts)
    server.behaviour.batch_retrieve_status = None
    assert responses(ask(server, texts, cache=str(tmp_path))) == [answer_for(t) for t in texts]
    assert len(server.batches) == 1 and server.requests == 0


def test_a_batch_that_cannot_be_submitted_is_asked_live_and_said(server, tmp_path, caplog):
    texts = ["a", "b"]
    server.reset(Behaviour(batch_upload_status=404))
    assert responses(ask(server, texts, cache=str(tmp_path))) == [answer_for(t) for t in texts]
    assert not server.batches and server.requests == 2
    assert "could not be submitted" in caplog.text and "asked live" in caplog.text
    assert _journaled(tmp_path) == _journaled(tmp_path, submitted=False) == 0


def test_a_batch_the_server_forgot_is_submitted_again(server, tmp_path, caplog):
    texts = ["a", "b"]
    cache = tmp_path / "cache"
    from vane.ai.providers.openai_batch import BatchJournal

    journal = BatchJournal(cache)
    submission = journal.intend(_keys(server, texts))
    journal.record(submission.token, "batch-gone")  # a batch the server never had
    journal.close()
    server.reset()
    assert responses(ask(server, texts, cache=str(cache))) == [answer_for(t) for t in texts]
    assert len(server.batches) == 1 and server.requests == 0
    assert "batch-gone" in caplog.text and "submitted again" in caplog.text


def _keys(server: FakeServer, texts: list[str]) -> list[str]:
    """The cache keys of ``texts``' requests, as the step's client computes them."""
    from vane.ai import registry
    from vane.ai.protocols import PromptRequest

    descriptor = registry.descriptor(
        "prompt", "openai", "m", {"base_url": server.base_url, "api_key": "k"}
    )
    client = descriptor.instantiate()
    try:
        return [client._key(PromptRequest(({"role": "user", "content": t},), {})) for t in texts]
    finally:
        client.close()


# ---- what mode="batch" accepts, and what it costs -----------------------------------------


def test_mode_is_checked_when_the_plan_is_built(server):
    with pytest.raises(ConfigurationError, match="mode='fast' is not 'live'"):
        ask(server, ["a"], mode="fast")
    with pytest.raises(ConfigurationError, match="Batch API, which provider 'vllm'"):
        vane.from_pydict({"t": ["a"]}).prompt("t", provider="vllm", model="m", mode="batch")
    with pytest.raises(ConfigurationError, match="batch_fallback='retry'"):
        ask(server, ["a"], batch_fallback="retry")
    with pytest.raises(ConfigurationError, match="batch_poll_interval"):
        ask(server, ["a"], batch_poll_interval=-1)
    with pytest.raises(ConfigurationError, match="mode='batch' is for prompt"):
        vane.from_pydict({"t": ["a"]}).embed_text(
            "t", provider="openai", model="e", base_url=server.base_url, mode="batch"
        )


@pytest.mark.ray
def test_a_batch_step_on_ray_runs_on_the_drivers_node_and_submits_once(server, tmp_path, on_ray):
    """On the Ray runner a batch step's actors run on the driver's node, where its journal is:
    the answers are the live ones in row order, and a rerun submits nothing again."""
    texts = [f"question {i}" for i in range(12)]
    server.reset(Behaviour(batch_polls=2))
    asked = ask(server, texts, cache=str(tmp_path / "cache"), batch_size=6, concurrency=2)
    assert "actor(s) x 1 CPU on the driver's node" in asked.explain(optimized=True)
    result = asked.write_parquet(str(tmp_path / "out"))
    rows = vane.read_parquet(str(tmp_path / "out")).to_pylist()
    assert [row["response"] for row in rows] == [answer_for(t) for t in texts]
    assert len(server.batches) == 2 and server.requests == 0
    assert next(iter(result.usage.values()))["batch_requests"] == 12
    assert _journaled(tmp_path / "cache") == 0  # every request answered and let go
    asked.write_parquet(str(tmp_path / "again"))
    assert len(server.batches) == 2 and server.requests == 0  # all from the cache


@given(
    prompt=st.integers(0, 10**9),
    completion=st.integers(0, 10**9),
    prices=st.fixed_dictionaries(
        {"input": st.floats(0, 100), "output": st.floats(0, 100)},
    ),
)
def test_tokens_answered_in_a_batch_cost_half(prompt, completion, prices):
    budget = Budget(max_cost=1.0, prices=tuple(sorted(prices.items())))
    live = {"prompt_tokens": prompt, "completion_tokens": completion}
    batched = {**live, "batch_prompt_tokens": prompt, "batch_completion_tokens": completion}
    tokens, live_cost = budget.spent(live)
    assert budget.spent(batched) == (tokens, pytest.approx(live_cost / 2))


def test_the_estimate_of_a_batch_step_is_at_half_the_price(server):
    prices = {"input": 1.0, "output": 2.0}
    texts = ["one two three four", "five six"]
    live = ask(server, texts, mode="live", max_tokens=10).estimate(prices=prices)
    batch = ask(server, texts, max_tokens=10).estimate(prices=prices)
    assert batch.requests == live.requests == 2
    assert batch.cost == pytest.approx(live.cost / 2)
    assert server.requests == 0 and not server.batches


def test_the_test_servers_batch_api_is_the_one_the_official_client_speaks(server):
    """The server's files and batches, driven by the official ``openai`` client: what vane
    sends and reads is what OpenAI's service takes and gives."""
    openai = pytest.importorskip("openai")
    import json

    server.reset(Behaviour(batch_polls=1, batch_fail={"bad"}))
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    lines = [
        {
            "custom_id": f"row-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": text}]},
        }
        for i, text in enumerate(["good", "bad"])
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = client.files.create(file=("requests.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.batches.retrieve(batch.id).status == "in_progress"
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts.completed == 1
    assert done.output_file_id and done.error_file_id
    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert output[0]["custom_id"] == "row-0"
    reply = output[0]["response"]["body"]["choices"][0]["message"]["content"]
    assert reply == answer_for("good")
    errors = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert errors[0]["custom_id"] == "row-1" and errors[0]["response"]["status_code"] == 500
    assert server.requests == 0 and dict(server.batch_items) == {"good": 1}
