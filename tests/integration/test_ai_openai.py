"""prompt and embed_text against a real OpenAI-compatible server on 127.0.0.1 (tests/ai_server.py):
every row answered exactly once, retries that happen and succeed, limits that hold, one failing
request that touches no neighbour, a reply that is no answer failing its row and only its row
(never cached), each row's value sent as the text it holds, answers paid for once, and
connections closed however a job ends."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import decimal
import gc
import json
import logging
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from tests.ai_server import Behaviour, FakeServer, Scripted, answer_for, vector_for
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
        Behaviour(fail_every=3, fail_status=429, retry_after="soon"),
        Behaviour(fail_every=3, fail_status=503, retry_after="Thu, 99 Foo 2015 25:61:00 GMT"),
    ],
    ids=[
        "429-retry-after",
        "500",
        "503",
        "malformed-json",
        "timeout",
        "retry-after-unreadable",
        "retry-after-bad-date",
    ],
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
    with pytest.warns(UserWarning, match=r"kept 2 failing rows as nulls"):
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


# ---- no server at the address: said at once --------------------------------------------------


@contextlib.contextmanager
def no_server() -> Iterator[str]:
    """The address of a port held bound and never listening: every connection is refused, and
    nothing else can take the port meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}/v1"


def step_of(rel: vane.Relation, verb: str, base_url: str, **options: object) -> vane.Relation:
    if verb == "prompt":
        return rel.prompt("text", model="m", base_url=base_url, api_key="k", **options)
    return rel.embed_text(
        "text", provider="openai", model="e", base_url=base_url, api_key="k", dimensions=4,
        **options,
    )  # fmt: skip


@pytest.mark.parametrize("verb", ["prompt", "embed_text"])
@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
@pytest.mark.parametrize("address", ["refused", "unknown host"])
@pytest.mark.filterwarnings("ignore:udf step .* kept .* failing row:UserWarning")
def test_no_server_at_the_address_fails_each_request_at_once_naming_it(
    tmp_path, verb, backend, address
):
    with contextlib.ExitStack() as stack:
        if address == "refused":
            base_url = stack.enter_context(no_server())
        else:
            base_url = "http://no-such-host.invalid/v1"  # .invalid never resolves (RFC 6761)
        options = {"execution_backend": backend, "batch_size": 4, "concurrency": 1}
        with pytest.raises(UDFError, match=re.escape(f"cannot reach {base_url}: ")):
            step_of(questions(8), verb, base_url, **options).to_arrow()
        result = step_of(
            questions(8), verb, base_url, on_error="null", error_column="error", **options
        ).write_parquet(tmp_path / "out")
    ((usage,),) = [list(result.usage.values())]
    # at most one attempt per request (a row's prompt, a batch's embedding), none retried
    assert usage.get("retries", 0) == 0
    assert 1 <= usage["requests"] <= (8 if verb == "prompt" else 2)
    errors = [r["error"] for r in vane.read_parquet(tmp_path / "out").to_pylist()]
    reason = "connection refused" if address == "refused" else "does not resolve"
    assert all(f"cannot reach {base_url}: " in e and reason in e for e in errors), errors


@pytest.mark.filterwarnings("ignore:udf step .* kept .* failing row:UserWarning")
def test_a_server_that_answered_and_went_away_is_retried_as_before():
    server = FakeServer().start()
    gone = threading.Event()

    def stop_the_server_before_row_8(batch: pa.Table) -> pa.Table:
        if batch["id"][0].as_py() >= 8 and not gone.is_set():
            while server.requests < 8 or server.in_flight:  # rows 0-7 answered (counted)
                time.sleep(0.01)
            server.stop()  # a restart, say: rows from 8 on find nothing listening
            gone.set()
        return batch

    try:
        gated = questions(24).map_batches(
            stop_the_server_before_row_8, schema={"id": "BIGINT", "text": "VARCHAR"},
            batch_size=8,
        )  # fmt: skip
        rows = ask(
            gated, server, batch_size=8, concurrency=1, max_retries=1, on_error="null",
            error_column="error",
        ).to_pylist()  # fmt: skip
    finally:
        server.stop()
    assert [r["error"] for r in rows[:8]] == [None] * 8
    errors = [r["error"] for r in rows[8:]]
    assert all("failed 2 times" in e and "cannot reach" not in e for e in errors), errors


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
        questions(1).embed_image("text", provider="vllm", model="m")


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


# ---- a reply that is no answer fails its row, and only its row ---------------------------------

ROWS = 10
BAD = "question 3"  # the row that gets the scripted reply


def chat(content: Any = "fine", *, usage: Any = None, **message: Any) -> dict[str, Any]:
    """A chat completion as a server sends it, with ``content`` (and other message fields)."""
    reply: dict[str, Any] = {
        "id": "chat-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        reply["usage"] = usage
    return reply


def answer_in(reply: Any) -> str | None:
    """What the row's answer is: the text at choices[0].message.content, if there is text."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def ran(rel: vane.Relation, directory: Path) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows of ``rel`` (written and read back) and what its one AI step counted; failing
    rows must be warned of, and are counted as ``failures``."""
    out = Path(tempfile.mkdtemp(dir=directory))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = rel.write_parquet(out / "out")
    rows = vane.read_parquet(out / "out").to_pylist()
    ((_, usage),) = result.usage.items()
    usage = {"failures": 0, **usage}
    warned = [str(w.message) for w in said if "failing row" in str(w.message)]
    assert bool(warned) == bool(usage["failures"]), warned
    return rows, usage


def check_only_its_row(server, tmp_path, scripted: Scripted, answer: str | None, retries: int):
    """10 rows, one of them (row 3) answered with ``scripted``: its row holds ``answer`` (None:
    it failed), every other row its own answer; the server saw one request per row plus the
    retries due; a failure is counted, never cached, and under on_error="raise" fails the job
    naming that row."""
    server.reset(Behaviour(scripted={BAD: scripted}))
    times = scripted.times
    cache = Path(tempfile.mkdtemp(dir=tmp_path))
    rows, usage = ran(
        ask(questions(ROWS), server, on_error="null", max_retries=1, cache=cache), tmp_path
    )
    assert [r["id"] for r in rows] == list(range(ROWS))
    assert [r["response"] for r in rows if r["id"] != 3] == [
        answer_for(f"question {i}") for i in range(ROWS) if i != 3
    ]
    assert rows[3]["response"] == answer
    assert server.requests == ROWS + retries  # no neighbour was sent again
    assert server.by_prompt[BAD] == 1 + retries
    assert usage["failures"] == (answer is None) and usage["requests"] == ROWS + retries
    # A rerun asks again exactly what failed: only answers are kept.
    scripted.times = times
    server.reset(Behaviour(scripted={BAD: scripted}))
    again, _ = ran(
        ask(questions(ROWS), server, on_error="null", max_retries=1, cache=cache), tmp_path
    )
    assert again == rows
    assert server.requests == (0 if answer is not None else 1 + retries)
    if answer is None:
        scripted.times = times
        server.reset(Behaviour(scripted={BAD: scripted}))
        with pytest.raises(UDFError, match=r"failed on input row 3: "):
            ask(questions(ROWS), server, max_retries=1).to_arrow()


TOOL_CALL = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
NO_ANSWER = {
    "refusal": chat(None, refusal="I cannot help with that"),
    "tool-call": chat(None, tool_calls=TOOL_CALL),
    "content-null": chat(None),
    "content-number": chat(5),
    "content-object": chat({"text": "hi"}),
    "content-list": chat(["hi"]),
    "content-bool": chat(True),
    "no-choices": {"id": "x", "object": "chat.completion"},
    "empty-choices": {"choices": []},
    "choices-not-a-list": {"choices": {"0": {"message": {"content": "hi"}}}},
    "no-message": {"choices": [{"index": 0}]},
    "message-not-an-object": {"choices": [{"message": "hi"}]},
    "reply-a-list": [1, 2],
    "reply-a-string": "hello",
    "reply-null": None,
    "error-object-with-200": {"error": {"message": "overloaded"}},
}


@pytest.mark.parametrize("reply", list(NO_ANSWER.values()), ids=list(NO_ANSWER))
def test_a_reply_without_an_answer_fails_its_row_only_and_is_never_cached(server, tmp_path, reply):
    body = json.dumps(reply) if isinstance(reply, str) or reply is None else reply
    check_only_its_row(server, tmp_path, Scripted(body), None, retries=0)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "many", "completion_tokens": -4},
        {"prompt_tokens": 1.5, "completion_tokens": True},
        {"prompt_tokens": None, "completion_tokens": [3]},
        {"prompt_tokens": 2**64, "completion_tokens": 9.3e18},
        "lots",
        [1, 2],
        10**30,
    ],
    ids=[
        "text-and-negative",
        "fraction-and-bool",
        "null-and-list",
        "past-64-bits",
        "a-string",
        "a-list",
        "huge",
    ],
)
def test_a_usage_that_is_not_a_count_leaves_the_answer_standing(server, tmp_path, usage):
    check_only_its_row(server, tmp_path, Scripted(chat("fine", usage=usage)), "fine", retries=0)


@pytest.mark.parametrize(
    ("scripted", "answer", "retries"),
    [
        (Scripted(b"\xff\xfe not json at all"), None, 1),
        (Scripted('{"choices": ['), None, 1),
        (Scripted(""), None, 1),
        (Scripted(b'{"choices": "\xff"}'), None, 1),
        (Scripted('{"choices": [', times=1), answer_for(BAD), 1),
        (Scripted({}, status=429, headers={"Retry-After": "soon"}, times=1), answer_for(BAD), 1),
        (Scripted({}, status=503, headers={"Retry-After": "\x7f"}), None, 1),
        (Scripted({"error": "no"}, status=400), None, 0),
        (Scripted("gone", status=404), None, 0),
    ],
    ids=[
        "not-utf8",
        "cut-short",
        "empty",
        "json-not-utf8",
        "cut-short-once",
        "429-unreadable-retry-after-once",
        "503-unreadable-retry-after",
        "400-error-not-an-object",
        "404-text",
    ],
)
def test_an_unreadable_reply_is_retried_as_due_and_reaches_no_neighbour(
    server, tmp_path, scripted, answer, retries
):
    check_only_its_row(server, tmp_path, scripted, answer, retries)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_replies = st.one_of(
    _json,
    _json.map(lambda v: {"choices": v}),
    _json.map(lambda v: {"choices": [v]}),
    _json.map(lambda v: {"choices": [{"message": v}]}),
    st.tuples(_json | st.text(), _json).map(lambda cu: chat(cu[0], usage=cu[1])),
    st.tuples(st.text(), _json).map(lambda cu: chat(cu[0], usage={"prompt_tokens": cu[1]})),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(reply=_replies)
def test_no_reply_however_malformed_reaches_past_its_row(server, tmp_path, reply):
    body = json.dumps(reply)  # sent as it is, whatever JSON it is
    check_only_its_row(server, tmp_path, Scripted(body), answer_in(reply), retries=0)


REVIEW_SCHEMA = {
    "title": "Review",
    "type": "object",
    "properties": {"summary": {"type": "string"}, "stars": {"type": "integer"}},
}


@pytest.mark.parametrize("pydantic_model", [False, True], ids=["json-schema", "pydantic"])
@pytest.mark.parametrize(
    "content",
    [
        '{"summary": "x", "stars": 1.5}',
        '{"summary": "x", "stars": 99999999999999999999999}',
        '{"summary": "x", "stars": "5"}',
        '{"summary": "x", "stars": true}',
        '{"summary": "x"}',
        '{"summary": "x", "stars": 1, "extra": 2}',
        '["x", 1]',
        "no JSON here",
        '{"summary": "x", "stars": 1',
    ],
)
def test_a_structured_answer_that_does_not_fit_fails_its_row_and_is_not_cached(
    server, tmp_path, content, pydantic_model
):
    from pydantic import BaseModel, ConfigDict

    class Review(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        summary: str
        stars: int

    server.reset(Behaviour(scripted={BAD: Scripted(chat(content))}))
    cache = tmp_path / "cache"
    return_format = Review if pydantic_model else REVIEW_SCHEMA
    options = {"return_format": return_format, "on_error": "null", "cache": cache}
    rows, usage = ran(ask(questions(ROWS), server, **options), tmp_path)
    assert rows[3]["response"] is None and usage["failures"] == 1
    assert all(r["response"] is not None for r in rows if r["id"] != 3)
    assert rows[4]["response"] == {"summary": "question 4", "stars": len("question 4")}
    assert server.requests == ROWS
    server.reset()  # the server now answers row 3 as it should
    rows, _ = ran(ask(questions(ROWS), server, **options), tmp_path)
    assert server.requests == 1 and rows[3]["response"] == {"summary": BAD, "stars": len(BAD)}


def test_a_misfit_is_never_cached(server, tmp_path):
    from pydantic import BaseModel

    class Review(BaseModel):
        summary: str
        stars: int

    server.behaviour = Behaviour(misfit={"question 2"})
    options = {"return_format": Review, "on_error": "null", "cache": tmp_path / "cache"}
    with pytest.warns(UserWarning, match="does not fit Review"):
        ask(questions(4), server, **options).to_arrow()
    with pytest.warns(UserWarning, match="does not fit Review"):
        ask(questions(4), server, **options).to_arrow()
    assert server.requests == 5 and server.by_prompt["question 2"] == 2


# ---- embeddings: a reply reaches only the rows it carried --------------------------------------


def embeddings_reply(texts: list[str], size: int = 4, **broken: Any) -> dict[str, Any]:
    """An /embeddings reply for ``texts``; ``broken`` replaces the item of a text."""
    data = [
        broken.get(t, {"object": "embedding", "index": i, "embedding": vector_for(t, size)})
        for i, t in enumerate(texts)
    ]
    return {"object": "list", "data": data, "usage": {"prompt_tokens": len(texts)}}


FIRST_BATCH = [f"question {i}" for i in range(5)]


def embed(server, tmp_path, **options: Any) -> tuple[list[dict[str, Any]], dict[str, int]]:
    options.setdefault("on_error", "null")
    rel = questions(ROWS).embed_text(
        "text", provider="openai", model="e", base_url=server.base_url, api_key="k",
        dimensions=4, batch_size=5, max_retries=1, **options,
    )  # fmt: skip
    return ran(rel, tmp_path)


@pytest.mark.parametrize(
    ("reply", "failing", "retries"),
    [
        ({"object": "list"}, range(5), 0),
        ({"data": "x"}, range(5), 0),
        ([1, 2], range(5), 0),
        (embeddings_reply(FIRST_BATCH[:4]), range(5), 0),
        ({"data": [{"index": 0, "embedding": [1.0] * 4}] * 5}, range(5), 0),
        (embeddings_reply(FIRST_BATCH, usage=1) | {"usage": "many"}, [], 0),
        (b"\xff not json", range(5), 1),
        (embeddings_reply(FIRST_BATCH, **{BAD: {"index": 3, "embedding": "x"}}), [3], 0),
        (embeddings_reply(FIRST_BATCH, **{BAD: {"index": 3, "embedding": [1.0]}}), [3], 0),
        (embeddings_reply(FIRST_BATCH, **{BAD: {"index": 3}}), [3], 0),
        (embeddings_reply(FIRST_BATCH, **{BAD: "x"}), range(5), 0),
        (
            embeddings_reply(FIRST_BATCH, **{BAD: {"index": 3, "embedding": [1, True, 0, 0]}}),
            [3],
            0,
        ),
    ],
    ids=[
        "no-data",
        "data-not-a-list",
        "reply-a-list",
        "too-few",
        "indexes-repeat",
        "usage-not-a-count",
        "not-json",
        "vector-not-numbers",
        "vector-wrong-size",
        "no-vector",
        "item-not-an-object",
        "vector-with-a-bool",
    ],
)
def test_a_malformed_embedding_reply_fails_only_the_rows_it_carried(
    server, tmp_path, reply, failing, retries
):
    server.reset(Behaviour(scripted={BAD: Scripted(reply)}))
    rows, usage = embed(server, tmp_path)
    failed = [r["id"] for r in rows if r["embedding"] is None]
    assert failed == list(failing) and usage["failures"] == len(failed)
    for r in rows:
        if r["embedding"] is not None:
            assert r["embedding"] == pytest.approx(vector_for(r["text"], 4))
    assert server.requests == 2 + retries  # one request per batch, nothing sent again
    assert server.by_text["question 7"] == 1


def test_an_embedding_request_refused_for_a_text_is_split_to_find_it(server, tmp_path):
    refused = Scripted({"error": {"message": "input too long"}}, status=400)
    server.reset(Behaviour(scripted={BAD: refused}))
    rows, _ = embed(server, tmp_path)
    assert [r["id"] for r in rows if r["embedding"] is None] == [3]
    assert server.by_text["question 7"] == 1  # the other batch was sent once
    with pytest.raises(UDFError, match="input too long"):
        embed(server, tmp_path, on_error="raise")


# ---- what a row's value is sent as -------------------------------------------------------------


def sent(server: FakeServer, table: pa.Table, column: str, **options: Any) -> list[Any]:
    """The prompts the server received for ``column``, in row order (None: nothing sent)."""
    server.reset()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "udf step .* kept .* failing row", UserWarning)
        rows = ask(vane.from_arrow(table), server, on_error="null", **options).to_pylist()
    prefix = len(answer_for(""))
    return [None if r["response"] is None else r["response"][prefix:] for r in rows]


def test_each_type_is_sent_as_the_text_it_holds(server):
    table = pa.table(
        {
            "binary": pa.array([b"caf\xc3\xa9", None], pa.binary()),
            "large_binary": pa.array([b"ok", b""], pa.large_binary()),
            "integer": pa.array([-(2**63), 7], pa.int64()),
            "double": pa.array([0.1, 1e-7], pa.float64()),
            "float": pa.array([0.1, float("nan")], pa.float32()),
            "decimal": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(38, 2)),
            "boolean": pa.array([True, False]),
            "date": pa.array([dt.date(2024, 5, 1), None]),
            "timestamp": pa.array([dt.datetime(2024, 5, 1, 12, 0, 0, 123456), None]),
            "timestamp_tz": pa.array([dt.datetime(2024, 5, 1, 12), None], pa.timestamp("s", "UTC")),
            "time": pa.array([dt.time(12, 30), None], pa.time64("us")),
            "list": pa.array([["a", None], []]),
            "struct": pa.array([{"x": 1, "y": [b"ok"]}, {"x": None, "y": None}]),
            "map": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
            "dictionary": pa.array(["a", "b"]).dictionary_encode(),
        }
    )
    expected = {
        "binary": ["café", None],
        "large_binary": ["ok", ""],
        "integer": ["-9223372036854775808", "7"],
        "double": ["0.1", "1e-7"],
        "float": ["0.1", "nan"],
        "decimal": ["1.50", None],
        "boolean": ["true", "false"],
        "date": ["2024-05-01", None],
        "timestamp": ["2024-05-01 12:00:00.123456", None],
        "timestamp_tz": ["2024-05-01 12:00:00.000000+0000", None],
        "time": ["12:30:00.000000", None],
        "list": ['["a", null]', "[]"],
        "struct": ['{"x": 1, "y": ["ok"]}', '{"x": null, "y": null}'],
        "map": ['{"k": 1}', None],
        "dictionary": ["a", "b"],
    }
    for name, texts in expected.items():
        assert sent(server, table.select([name]).rename_columns(["text"]), "text") == texts, name
    assert server.requests == sum(t is not None for t in expected["dictionary"])


def test_a_template_fills_in_each_columns_text_and_formats_only_where_asked(server):
    table = pa.table(
        {"tags": [["a"]], "price": [2.5], "blob": [b"hi"], "when": [dt.date(2024, 1, 2)]}
    )
    template = "{tags} {price} {price:.2f} {blob} {blob!r} {when:%d/%m}"
    assert sent(server, table, "", template=template) == ["[\"a\"] 2.5 2.50 hi b'hi' 02/01"]
    assert sent(server, table, "", template="{tags:.2f}") == [None]
    assert server.requests == 0
    with pytest.raises(UDFError, match=r"input row 0: template placeholder \{tags:\.2f\} cannot"):
        ask(vane.from_arrow(table), server, template="{tags:.2f}").to_arrow()


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=st.lists(st.binary(max_size=12) | st.text(max_size=6).map(str.encode), max_size=8))
def test_binary_is_sent_as_its_utf8_text_or_fails_its_row_unsent(server, values):
    def text(value: bytes) -> str | None:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None

    table = pa.table({"text": pa.array(values, pa.binary())})
    assert sent(server, table, "text") == [text(v) for v in values]
    assert server.requests == sum(text(v) is not None for v in values)
    server.reset()
    rel = vane.from_arrow(table)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "udf step .* kept .* failing row", UserWarning)
        rows = rel.embed_text(
            "text", provider="openai", model="e", base_url=server.base_url, api_key="k",
            on_error="null", dimensions=3,
        ).to_pylist()  # fmt: skip
    assert [r["embedding"] is not None for r in rows] == [text(v) is not None for v in values]
    assert server.by_text == _counts([text(v) for v in values])


def _counts(texts: list[str | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in texts:
        if t is not None:
            counts[t] = counts.get(t, 0) + 1
    return counts


# ---- execution options ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_concurrency_min_max_runs_ai_functions(server, backend):
    options = {"concurrency": (1, 2), "execution_backend": backend, "batch_size": 4}
    out = ask(questions(20), server, **options)
    assert "concurrency=(1, 2)" in out.explain(optimized=True)
    assert all(r["response"] == answer_for(r["text"]) for r in out.to_pylist())
    embedded = questions(20).embed_text(
        "text", provider="openai", model="e", base_url=server.base_url, api_key="k", **options
    )
    assert len([r for r in embedded.to_pylist() if r["embedding"] is not None]) == 20


# ---- connections are closed however a job ends --------------------------------------------------


def connections_to(server: FakeServer) -> int:
    """Sockets of this process connected to ``server`` (its own ends are not counted: the
    server closes them when it reads the client's close, on its own thread)."""
    for thread in threading.enumerate():
        if thread.name.startswith("vane-actor"):
            thread.join(60)  # an actor ends once its job has; this waits for that, not a clock
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == server.port:
                    inodes.add(f"socket:[{fields[9]}]")
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sum(link in inodes for link in links)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp")
@pytest.mark.filterwarnings("ignore:udf step .* kept .* failing row:UserWarning")
def test_failing_and_stopped_jobs_leave_no_connection_open(server):
    server.behaviour = Behaviour(refuse={"question 3"})
    gc.collect()
    gc.disable()  # whatever is closed here is closed by vane, not by the garbage collector
    try:
        for _ in range(10):
            with pytest.raises(UDFError):
                ask(questions(10), server).to_arrow()
            ask(questions(600), server, batch_size=8, on_error="null").limit(3).to_arrow()
            for _ in ask(questions(600), server, batch_size=8, on_error="null").iter_batches():
                break
        assert server.requests > 30 and connections_to(server) == 0
    finally:
        gc.enable()


def test_a_ctrl_c_in_vane_prompt_closes_its_connections(tmp_path):
    server = FakeServer(Behaviour(latency=0.5)).start()
    try:
        vane.from_pydict({"text": [f"q {i}" for i in range(400)]}).write_parquet(
            tmp_path / "in.parquet"
        )
        script = textwrap.dedent(
            f"""
            import gc, os, sys, threading
            from vane.cli import run
            sys.argv = ["vane", "prompt", "in.parquet", "--column", "text", "--model", "m",
                        "--base-url", {server.base_url!r}, "--api-key", "k", "-o", "out/"]
            gc.disable()
            try:
                run()
            except SystemExit as done:
                code = done.code
            for thread in threading.enumerate():
                if thread.name.startswith("vane-actor"):
                    thread.join(60)
            gc.enable()
            gc.collect()
            print("exit", code, flush=True)
            """
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        while server.in_flight < 32 and process.poll() is None:
            time.sleep(0.01)  # waits for requests to be in flight; asserts nothing about time
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        server.stop()
    assert "exit 130" in out, (out, err)
    assert "Unclosed" not in err, err


# ---- a cache that cannot be read ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_corrupt_cache_entry_is_a_miss_with_a_warning_naming_the_file(
    server, tmp_path, caplog, capfd, backend
):
    cache = tmp_path / "cache"
    first = ask(questions(6), server, cache=cache).to_pylist()
    db = sqlite3.connect(cache / "answers.sqlite")
    keys = [k for (k,) in db.execute("SELECT key FROM answers ORDER BY key LIMIT 3")]
    db.execute("UPDATE answers SET value = '{not json' WHERE key = ?", (keys[0],))
    db.execute("UPDATE answers SET value = 'null' WHERE key = ?", (keys[1],))  # an old vane's
    db.execute("UPDATE answers SET prompt_tokens = 'x' WHERE key = ?", (keys[2],))
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger="vane"):
        again = ask(questions(6), server, cache=cache, execution_backend=backend).to_pylist()
    assert again == first
    assert server.requests == 6 + 2  # the two unreadable entries were asked again, once each
    said = caplog.text + capfd.readouterr().err
    assert f"the answer cache {cache / 'answers.sqlite'}" in said and "delete the file" in said
    ask(questions(6), server, cache=cache, execution_backend=backend).to_arrow()
    assert server.requests == 8  # and were kept anew


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
@pytest.mark.parametrize("damage", ["not-sqlite", "cut-short", "other-table"])
def test_a_cache_file_that_is_not_a_cache_is_a_clear_error_naming_it(
    server, tmp_path, backend, damage
):
    cache = tmp_path / "cache"
    ask(questions(20), server, cache=cache).to_arrow()
    path = cache / "answers.sqlite"
    for other in cache.iterdir():
        if other != path:
            other.unlink()
    if damage == "not-sqlite":
        path.write_bytes(b"these are not the answers you are looking for" * 100)
    elif damage == "cut-short":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2] + bytes(100))
    else:
        path.unlink()
        sqlite3.connect(path).execute("CREATE TABLE answers (question TEXT)").connection.commit()
    for on_error in ("raise", "skip"):
        with pytest.raises(ConfigurationError) as raised:
            ask(
                questions(20), server, cache=cache, on_error=on_error, execution_backend=backend
            ).to_arrow()
        message = str(raised.value)
        assert f"the answer cache {path} cannot be used" in message
        assert "delete it" in message and "on_error" not in message
    assert server.requests == 20  # none sent again: the job stopped before any request


def test_a_cache_directory_that_is_a_file_is_a_clear_error(server, tmp_path):
    (tmp_path / "cache").write_text("a file")
    with pytest.raises(ConfigurationError, match=r"cache=.* cannot be a cache directory"):
        ask(questions(2), server, cache=tmp_path / "cache").to_arrow()


# ---- templates that cannot be filled are errors when the plan is built ------------------------


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{0}", r"placeholder \{0\} is positional"),
        ("{} and {}", r"placeholder \{\} is positional"),
        ("{text.upper}", r"\{text.upper\} is not a column name"),
        ("{text[0]}", r"\{text\[0\]\} is not a column name"),
        ("{text", "is not a valid format string"),
        ("text}", "is not a valid format string"),
        ("{text:{width}}", "placeholder inside its format spec"),
        ("{text!x}", "unknown conversion"),
        ("no placeholder", "names no column"),
    ],
)
def test_a_template_that_cannot_be_filled_is_a_configuration_error(template, error):
    with pytest.raises(ConfigurationError, match=error):
        questions(1).prompt(template=template, model="m", base_url="http://127.0.0.1:9/v1")


def test_a_row_failing_on_its_own_inside_a_split_batch_is_not_split_again(server):
    """A refused request (400) splits its batch to find the text it refuses; a row that
    failed on its own in one half (bytes that are not UTF-8, never sent) is that half's only
    failure: its healthy neighbour is not sent once more for it."""
    server.behaviour.scripted["q3"] = Scripted({"error": {"message": "too long"}}, status=400)
    texts = [b"q0", b"\xff", b"q2", b"q3", b"q4"]
    rel = vane.from_arrow(pa.table({"text": pa.array(texts, pa.binary())}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = rel.embed_text(
            "text",
            provider="openai",
            model="e",
            base_url=server.base_url,
            api_key="k",
            dimensions=3,
            batch_size=5,
            on_error="null",
        ).to_pylist()
    assert [r["embedding"] is None for r in rows] == [False, True, False, True, False]
    # the whole batch once, then its half [q0, \xff] once: no third send of q0
    assert server.by_text["q0"] == 2
