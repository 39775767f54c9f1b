"""prompt and embed_text against a real OpenAI-compatible server on 127.0.0.1 (tests/ai_server.py):
every row answered exactly once, retries that happen and succeed, limits that hold, one failing
request that touches no neighbour, and answers paid for once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import vane
from tests.ai_server import Behaviour, FakeServer, answer_for
from vane import col
from vane.errors import ConfigurationError, MissingDependencyError, UDFError

pytest.importorskip("aiohttp")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server():
    running = FakeServer().start()
    yield running
    running.stop()


def questions(n: int) -> vane.Relation:
    return vane.from_pydict({"id": list(range(n)), "text": [f"question {i}" for i in range(n)]})


def ask(rel: vane.Relation, server: FakeServer, **options: object) -> vane.Relation:
    options.setdefault("model", "test-model")
    return rel.prompt("text", base_url=server.base_url, api_key="key", **options)


def _hold(server: FakeServer, until: Callable[[int], bool]) -> None:
    """The server answers request number ``n`` only once ``until(n)`` holds (a minute at most):
    a test then sees what it asks for however fast or slow the machine is."""
    answer = server._misbehave

    async def held(number: int) -> object:
        deadline = time.monotonic() + 60
        while not until(number) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return await answer(number)

    server._misbehave = held  # type: ignore[method-assign]


def test_every_row_is_answered_exactly_once_and_keeps_its_row(server):
    out = ask(questions(300), server)
    assert out.columns == ["id", "text", "response"]
    rows = out.to_pylist()
    assert [r["id"] for r in rows] == list(range(300))
    assert all(r["response"] == answer_for(r["text"]) for r in rows)
    assert server.requests == 300 and set(server.by_prompt.values()) == {1}
    plan = out.explain(optimized=True)
    assert "prompt[openai test-model](text)" in plan and "reads=[text]" in plan


@pytest.mark.parametrize(
    "behaviour",
    [
        Behaviour(fail_every=3, fail_status=429, retry_after="0.01"),
        Behaviour(fail_every=4, fail_status=500),
        Behaviour(fail_every=5, fail_status=503, retry_after="0"),
        Behaviour(malformed_every=4),
        Behaviour(stall_every=7, stall_seconds=3),
    ],
    ids=["429-retry-after", "500", "503", "malformed-json", "timeout"],
)
def test_failures_are_retried_and_every_row_still_answered_once(server, behaviour):
    server.behaviour = behaviour
    rows = ask(questions(60), server, timeout=0.5).to_pylist()
    assert all(r["response"] == answer_for(r["text"]) for r in rows)
    assert server.requests > 60  # some were retried...
    answered = {p for p, n in server.by_prompt.items() if n >= 1}
    assert len(answered) == 60  # ...and none was lost


def test_requests_in_flight_never_exceed_the_limit(server):
    # Each request waits until 8 have been in flight at once: the limit is reached, whatever
    # the machine's speed, and is never passed.
    server.behaviour = Behaviour(latency=0.05)
    _hold(server, lambda _: server.max_in_flight >= 8)
    ask(questions(100), server, max_concurrent_requests=8).to_pylist()
    assert server.max_in_flight == 8


def test_requests_per_minute_hold(server):
    started = time.monotonic()
    ask(questions(12), server, requests_per_minute=300).to_pylist()  # one each 0.2 s
    # The limiter sends the k-th request k * 0.2 s after the first, at the soonest, and a busy
    # machine only delays arrivals: never sooner than that after the run began.
    arrivals = sorted(server.arrivals)
    assert len(arrivals) == 12
    assert all(t - started >= k * 0.2 - 0.001 for k, t in enumerate(arrivals)), arrivals
    assert arrivals[-1] - arrivals[0] > 1.0  # (0.2 s apart: 2.2 s from the first to the last)


def test_one_refused_request_fails_its_row_only(server):
    server.behaviour = Behaviour(refuse={"question 3", "question 7"})
    with pytest.warns(UserWarning, match=r"kept 2 failing row\(s\) as nulls"):
        rows = ask(questions(10), server, on_error="null").to_pylist()
    assert [r["id"] for r in rows if r["response"] is None] == [3, 7]
    assert set(server.by_prompt.values()) == {1}  # no neighbour was sent again
    with pytest.warns(UserWarning, match=r"skipped 2 row"):
        kept = ask(questions(10), server, on_error="skip").to_pylist()
    assert [r["id"] for r in kept] == [0, 1, 2, 4, 5, 6, 8, 9]
    with pytest.raises(UDFError, match=r"input row 3 and 1 other.*refused: question 3"):
        ask(questions(10), server).to_arrow()


def test_structured_output_becomes_a_struct_and_a_misfit_fails_its_row(server):
    from pydantic import BaseModel

    class Review(BaseModel):
        summary: str
        stars: int

    server.behaviour = Behaviour(misfit={"question 2"})
    out = ask(questions(4), server, return_format=Review, on_error="null")
    assert str(out.schema.field("response").type) == "struct<summary: string, stars: int64>"
    with pytest.warns(UserWarning, match="does not fit Review"):
        rows = out.to_pylist()
    assert rows[1]["response"] == {"summary": "question 1", "stars": len("question 1")}
    assert rows[2]["response"] is None


def test_a_template_fills_placeholders_from_columns_and_nulls_ask_nothing(server):
    rel = vane.from_pydict({"name": ["ann", None], "city": ["Oslo", "Rome"]})
    out = rel.prompt(
        template="Where does {name} live? In {city}.",
        model="m",
        base_url=server.base_url,
        api_key="k",
        system="Be brief.",
    )
    rows = out.to_pylist()
    assert rows[0]["response"] == answer_for("Where does ann live? In Oslo.")
    assert rows[1]["response"] is None and server.requests == 1


def test_the_expression_form_works_in_select_and_filter(server):
    answer = vane.ai.prompt(col("text"), model="m", base_url=server.base_url, api_key="k")
    out = questions(5).select("id", answer.alias("a")).filter(col("id") > 2)
    assert out.to_pylist() == [
        {"id": 3, "a": answer_for("question 3")},
        {"id": 4, "a": answer_for("question 4")},
    ]
    assert server.requests == 2  # the filter ran first


def test_embeddings_from_the_server(server):
    out = questions(10).embed_text(
        "text", provider="openai", model="e", base_url=server.base_url, api_key="k", dimensions=4
    )
    assert out.schema.field("embedding").type == vane.types.to_arrow_type("FLOAT[4]")
    rows = out.to_pylist()
    assert len(rows) == 10 and len(rows[0]["embedding"]) == 4


# ---- pay once ---------------------------------------------------------------------------------


def test_the_cache_answers_repeats_and_reruns_without_requests(server, tmp_path):
    rel = vane.from_pydict({"text": ["same", "same", "other", "same"]})
    first = ask(rel, server, cache=tmp_path / "cache").to_pylist()
    assert server.requests == 2  # identical requests within a run are sent once
    again = ask(rel, server, cache=tmp_path / "cache").to_pylist()
    assert again == first and server.requests == 2
    changed = ask(rel, server, cache=tmp_path / "cache", temperature=0.5).to_pylist()
    assert changed == first and server.requests == 4  # other options: other requests


@pytest.mark.slow
def test_a_killed_run_resumes_without_repeating_answered_requests(server, tmp_path):
    server.behaviour = Behaviour(latency=0.05)
    # Requests past the 100th wait until the first run is killed: it cannot finish first.
    killed = threading.Event()
    _hold(server, lambda number: number <= 100 or killed.is_set())
    cache = tmp_path / "cache"
    script = textwrap.dedent(
        f"""
        import vane
        vane.configure(progress=False)
        rel = vane.from_pydict({{"text": [f"question {{i}}" for i in range(400)]}})
        out = rel.prompt("text", model="test-model", base_url={server.base_url!r}, api_key="k",
                         cache={str(cache)!r}, max_concurrent_requests=8)
        out.write_parquet({str(tmp_path / "out")!r})
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + 120
    while server.requests < 100 and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    killed.set()
    answered_before = sum(1 for n in server.by_prompt.values() if n)
    assert 100 <= answered_before < 400
    rows = ask(
        vane.from_pydict({"text": [f"question {i}" for i in range(400)]}), server, cache=cache
    ).to_pylist()
    assert all(r["response"] == answer_for(r["text"]) for r in rows)
    # Every prompt was sent once over both runs, but for the few in flight at the kill.
    assert server.requests <= 400 + 8
    assert sum(server.by_prompt.values()) == server.requests


# ---- errors when the plan is built ------------------------------------------------------------


def test_unknown_provider_missing_model_and_missing_key_are_clear(monkeypatch):
    with pytest.raises(ConfigurationError, match="unknown provider 'nope'; the providers are"):
        questions(1).prompt("text", provider="nope", model="m")
    with pytest.raises(ConfigurationError, match="needs model="):
        questions(1).prompt("text", base_url="http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        questions(1).prompt("text", model="gpt-4o-mini")
    with pytest.raises(ConfigurationError, match="does not do embed_image"):
        questions(1).embed_image("text", provider="openai", model="m", api_key="k")


def test_a_missing_package_names_the_extra():
    from vane.ai.registry import require_packages

    with pytest.raises(MissingDependencyError, match=r"pip install 'vane-data\[openai\]'"):
        require_packages("openai", {"surely_not_installed_module": "openai"})


def test_import_vane_ai_imports_no_client():
    code = (
        "import sys, vane, vane.ai\n"
        "print([m for m in ('aiohttp', 'openai', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_official_client_talks_to_the_test_server(server):
    # The fake server is only worth testing against if the real client accepts it.
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    chat = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    assert chat.choices[0].message.content == answer_for("hello")
    assert chat.usage is not None and chat.usage.prompt_tokens == 1
    vectors = client.embeddings.create(model="e", input=["a", "b"], dimensions=3)
    assert [len(d.embedding) for d in vectors.data] == [3, 3]
    server.behaviour = Behaviour(fail_every=1, fail_status=429, retry_after="0")
    with pytest.raises(openai.RateLimitError, match="injected 429"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_usage_is_counted_per_step_in_the_write_result_events_and_explain(
    server, tmp_path, backend
):
    from vane.observe.events import BatchDone, StageFinished, subscribe

    server.behaviour = Behaviour(fail_every=7, fail_status=500)  # some requests retried
    out = ask(questions(40), server, execution_backend=backend, batch_size=8)
    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        result = out.write_parquet(tmp_path / "out")
    finally:
        unsubscribe()
    ((step, usage),) = result.usage.items()
    assert step == "prompt[openai test-model](text)"
    # every request the server saw (retries included); tokens as the server reported them
    assert usage["requests"] == server.requests > 40
    assert usage["retries"] == server.requests - 40
    assert usage["prompt_tokens"] == 40 * 2 and usage["completion_tokens"] == 40 * 4
    assert f"{server.requests} requests, 80 prompt tokens, 160 completion tokens" in str(result)
    (finished,) = [e for e in seen if isinstance(e, StageFinished)]
    assert dict(finished.usage) == usage
    summed: dict[str, int] = {}
    for event in seen:
        if isinstance(event, BatchDone):
            for name, value in event.usage.items():
                summed[name] = summed.get(name, 0) + value
    assert summed == usage  # the progress display's running totals add up to the same


def test_explain_analyze_runs_the_plan_and_shows_what_each_step_did(server):
    text = ask(questions(10), server).explain(analyze=True)
    line = next(x for x in text.splitlines() if "prompt[openai test-model](text)" in x)
    assert "-- 10 rows in, 10 out" in line and "10 requests, 20 prompt tokens" in line
    assert text.endswith("10 rows") and "ran in" in text.splitlines()[-1]
    assert server.requests == 10


def test_the_test_server_reads_message_content_given_as_parts(server):
    import json
    import urllib.request

    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "question 1"}]}],
    }
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as reply:
        answer = json.loads(reply.read())
    assert answer["choices"][0]["message"]["content"] == answer_for("question 1")
