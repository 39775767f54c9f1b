"""The error ledger (``write_*(errors_to=...)``) and ``retry_failed``: each row a step's
``on_error`` dropped or nulled is kept with its keys, its step, its error and the calls it was
in, committed with the output or not at all; a retry runs only those rows and adds the ones
that succeed, so the output ends with every row exactly once.

The UDFs fail for chosen ids, read from a file the test rewrites between runs (a model that is
down for some rows, then back); the AI function fails chosen prompts on vane's own
OpenAI-compatible server, once each (``Scripted(times=1)``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from vane.errors import ConfigurationError, LedgerError, UDFError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """The steps warn about the rows they skip; these tests read the ledger instead."""
    vane.configure(progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


class Flaky:
    """A model that fails the ids listed in ``failing`` (a JSON file), whatever batch they are
    in, and doubles the others. The test holds one to say which ids fail (``fail``); the job
    is given the class, which each actor constructs (``as_step``)."""

    def __init__(self, failing: Path) -> None:
        self.failing = failing

    def as_step(self) -> dict[str, object]:
        return {"fn": Flaky, "fn_constructor_args": (self.failing,)}

    def fail(self, ids: list[int]) -> None:
        self.failing.write_text(json.dumps(sorted(ids)))

    def __call__(self, batch: pa.Table) -> pa.Table:
        bad = set(json.loads(self.failing.read_text())) if self.failing.exists() else set()
        hit = [i for i in batch["id"].to_pylist() if i in bad]
        if hit:
            raise ValueError(f"model down for id {hit[0]}")
        return batch.append_column("y", pc.multiply(batch["id"], 2))


def _job(model: Flaky, rows: int = 40, batch_size: int = 8, **options: object) -> vane.Relation:
    source = vane.range(rows).select("id", "id % 3 AS k")
    options.setdefault("on_error", "skip")
    schema = {"id": "BIGINT", "k": "BIGINT", "y": "BIGINT"}
    return source.map_batches(**model.as_step(), schema=schema, batch_size=batch_size, **options)


def _ids(path: Path) -> list[int]:
    return sorted(r["id"] for r in vane.read_parquet(str(path)).select("id").to_pylist())


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_the_ledger_keeps_each_failed_row_its_step_error_and_attempts(tmp_path, backend):
    model = Flaky(tmp_path / "failing.json")
    model.fail([3, 17, 18])
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    job = _job(model, execution_backend=backend)
    result = job.write_parquet(str(out), errors_to=str(errors))
    assert result.rows == 37
    ledger = pq.read_table(errors)
    assert ledger.schema.names == ["id", "k", "step", "error_type", "error_message", "attempts"]
    rows = sorted(ledger.to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["k"]) for r in rows] == [(3, 0), (17, 2), (18, 0)]
    assert {r["step"] for r in rows} == {"Flaky"}
    assert {r["error_type"] for r in rows} == {"ValueError"}
    assert [r["error_message"] for r in rows] == [f"model down for id {i}" for i in (3, 17, 18)]
    # A batch of 8 is called once, then halves of 4, 2 and 1 row: four calls per lone row;
    # 16..23 holds two, which part at the halves of 2 (17 | 18): also four.
    assert [r["attempts"] for r in rows] == [4, 4, 4]
    assert _ids(out) == sorted(set(range(40)) - {3, 17, 18})


@pytest.mark.parametrize("key", [None, "id"])
def test_retries_add_the_rows_that_succeed_once_and_keep_those_that_fail_again(tmp_path, key):
    """Keyed by every input column (the default), the ledger's rows are run again as they are;
    keyed by id, they are found again in the step's input."""
    model = Flaky(tmp_path / "failing.json")
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    job = _job(model, max_retries=1)
    model.fail([0, 9, 10, 39])
    job.write_parquet(str(out), errors_to=str(errors), errors_key=key)
    assert pq.read_table(errors).schema.names[:2] == (
        ["id", "k"] if key is None else ["id", "step"]
    )
    assert sorted(pq.read_table(errors)["id"].to_pylist()) == [0, 9, 10, 39]

    model.fail([10])  # the model is back, but for id 10
    result = job.retry_failed(str(errors)).write_parquet(
        str(out), mode="append", errors_to=str(errors)
    )
    assert result.rows == 3
    again = pq.read_table(errors).to_pylist()
    assert list(again[0])[:2] == (["id", "k"] if key is None else ["id", "step"])  # same keys
    # The 4 retried rows are one batch: called twice (max_retries=1), then halves of 2 and 1.
    assert [(r["id"], r["attempts"]) for r in again] == [(10, 4)]
    assert _ids(out) == [i for i in range(40) if i != 10]

    model.fail([])
    job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
    assert _ids(out) == list(range(40))
    empty = pq.read_table(errors)
    assert empty.num_rows == 0 and "step" in empty.schema.names  # a reader can rely on it
    # Retrying an empty ledger adds nothing.
    job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
    assert _ids(out) == list(range(40))


def _down_at_7(batch: pa.Table) -> pa.Table:  # the model of KILLED, in this process
    if 7 in batch["id"].to_pylist():
        raise ValueError("down")
    return pa.table({"id": batch["id"]})


def test_a_row_is_retried_from_the_step_that_failed_it(tmp_path):
    """Two steps that skip rows: a row the first dropped runs through both again, a row the
    second dropped through the second only."""
    first, second = Flaky(tmp_path / "first.json"), Flaky(tmp_path / "second.json")
    calls = tmp_path / "calls"

    def counted(batch: pa.Table) -> pa.Table:
        with open(calls, "a") as log:
            log.write(f"{batch.num_rows}\n")
        return batch.append_column("z", second(batch.select(["id"]))["y"])

    job = (
        vane.range(30)
        .map_batches(
            **first.as_step(), schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=4, on_error="skip"
        )
        .map_batches(
            counted,
            schema={"id": "BIGINT", "y": "BIGINT", "z": "BIGINT"},
            batch_size=4,
            on_error="skip",
        )
    )
    first.fail([5, 6])
    second.fail([20])
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    job.write_parquet(str(out), errors_to=str(errors))
    ledger = pq.read_table(errors)
    steps = [step.rsplit(".", 1)[-1] for step in ledger["step"].to_pylist()]  # (qualnames)
    assert sorted(zip(ledger["id"].to_pylist(), steps, strict=True)) == [
        (5, "Flaky"),
        (6, "Flaky"),
        (20, "counted"),
    ]
    assert ledger.schema.names[:2] == ["id", "y"]  # the second step's input: the whole row
    first.fail([])
    second.fail([])
    calls.unlink()
    job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
    assert _ids(out) == list(range(30))
    rows = vane.read_parquet(str(out)).to_pylist()
    assert all(r["y"] == 2 * r["id"] and r["z"] == 2 * r["id"] for r in rows)
    assert sum(int(n) for n in calls.read_text().split()) == 3  # the second step: 5, 6, 20

    # Keyed by id alone, a row of the second step is found again by running the first on
    # every row, which could drop rows the output holds: refused, saying why.
    (tmp_path / "out").rename(tmp_path / "old")
    first.fail([5])
    second.fail([21])
    job.write_parquet(str(out), errors_to=str(errors), errors_key="id")
    with pytest.raises(LedgerError, match="could fail rows the output holds already"):
        job.retry_failed(str(errors))


def test_on_error_null_keeps_the_rows_in_the_output_and_in_the_ledger(tmp_path):
    model = Flaky(tmp_path / "failing.json")
    model.fail([2])
    out, errors = tmp_path / "out.parquet", tmp_path / "errors.parquet"
    job = _job(model, on_error="null", error_column="error")
    job.write_parquet(str(out), errors_to=str(errors), errors_key="id")
    assert pq.read_table(errors).select(["id", "step", "error_type"]).to_pylist() == [
        {"id": 2, "step": "Flaky", "error_type": "ValueError"}
    ]
    nulled = [r for r in pq.read_table(out).to_pylist() if r["y"] is None]
    # Every column the function returns is null there, its id too: the ledger says whose.
    assert [(r["id"], r["error"]) for r in nulled] == [(None, "ValueError: model down for id 2")]
    with pytest.raises(LedgerError, match="hold those rows twice"):
        job.retry_failed(str(errors))


def test_a_write_that_fails_leaves_neither_output_nor_ledger(tmp_path):
    model = Flaky(tmp_path / "failing.json")
    model.fail([4])

    def breaks(batch: pa.Table) -> pa.Table:
        if 30 in batch["id"].to_pylist():
            raise RuntimeError("the disk is full")
        return batch.select(["id", "y"])

    job = _job(model).map_batches(breaks, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=8)
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    with pytest.raises(UDFError, match="the disk is full"):
        job.write_parquet(str(out), errors_to=str(errors))
    assert sorted(os.listdir(tmp_path)) == ["failing.json"]  # nothing staged is left either

    # An earlier run's ledger and output stay as they were.
    _job(model).write_parquet(str(out), errors_to=str(errors))
    before = pq.read_table(errors).to_pylist()
    with pytest.raises(UDFError):
        job.write_parquet(str(out), mode="overwrite", errors_to=str(errors))
    assert pq.read_table(errors).to_pylist() == before
    assert len(_ids(out)) == 39


KILLED = textwrap.dedent(
    """
    import json, sys, pyarrow as pa, vane
    vane.configure(progress=False)
    out, errors = sys.argv[1:3]

    def model(batch):
        if 7 in batch["id"].to_pylist():
            raise ValueError("down")
        return pa.table({"id": batch["id"]})

    rel = vane.range(20).map_batches(model, schema={"id": "BIGINT"}, batch_size=4, on_error="skip")
    rel.write_parquet(out, mode="overwrite", errors_to=errors)
    """
)


def test_a_write_killed_as_it_commits_leaves_the_last_output_and_ledger(tmp_path):
    """A real writer SIGKILLed as its output's commit begins (held there by the commit's test
    hook): the output and the ledger of the run before are both as they were."""
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    vane.range(3).select("id", "id AS y").write_parquet(str(out))
    pq.write_table(pa.table({"id": [99]}), errors)  # the last run's ledger, as far as it matters
    marker = tmp_path / "paused"
    env = dict(os.environ, VANE_COMMIT_PAUSE=f"staged:{marker}")
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(out), str(errors)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the writer never reached its commit"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        marker.unlink(missing_ok=True)
    assert _ids(out) == [0, 1, 2]
    assert pq.read_table(errors).to_pylist() == [{"id": 99}]
    # The killed writer had staged both: its new ledger waits, unseen, beside the old one.
    staged = [p for p in tmp_path.iterdir() if p.name.startswith(".errors.parquet.vane-staging-")]
    assert [pq.read_table(p / "errors.parquet")["id"].to_pylist() for p in staged] == [[7]]
    assert any(p.name.startswith(".out.vane-staging-") for p in tmp_path.iterdir())
    # The next write removes what the killed one staged, and commits both.
    job = vane.range(20).map_batches(
        _down_at_7, schema={"id": "BIGINT"}, batch_size=4, on_error="skip"
    )
    job.write_parquet(str(out), mode="overwrite", errors_to=str(errors))
    assert _ids(out) == [i for i in range(20) if i != 7]
    assert pq.read_table(errors)["id"].to_pylist() == [7]
    assert sorted(n for n in os.listdir(tmp_path) if "staging" in n) == []


def test_prompt_failures_reach_the_ledger_and_a_retry_answers_them(tmp_path):
    pytest.importorskip("aiohttp")
    from tests.ai_server import Behaviour, FakeServer, Scripted, answer_for

    server = FakeServer().start()
    try:
        refused = {"error": {"message": "overloaded", "type": "invalid_request"}}
        server.behaviour = Behaviour(
            scripted={f"question {i}": Scripted(refused, status=400, times=1) for i in (1, 6)}
        )
        rel = vane.from_pydict({"id": list(range(8)), "q": [f"question {i}" for i in range(8)]})
        job = rel.prompt(
            "q", base_url=server.base_url, api_key="key", model="m", on_error="skip", batch_size=4
        )
        out, errors = tmp_path / "out", tmp_path / "errors.parquet"
        job.write_parquet(str(out), errors_to=str(errors))
        ledger = pq.read_table(errors).to_pylist()
        assert sorted(r["id"] for r in ledger) == [1, 6]
        assert all(
            r["step"].startswith("prompt") and "overloaded" in r["error_message"] for r in ledger
        )
        job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
        rows = vane.read_parquet(str(out)).to_pylist()
        assert sorted(r["id"] for r in rows) == list(range(8))
        assert all(r["response"] == answer_for(r["q"]) for r in rows)
        assert pq.read_table(errors).num_rows == 0
    finally:
        server.stop()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failing=st.sets(st.integers(0, 23), max_size=24),
    again=st.sets(st.integers(0, 23)),
    batch_size=st.sampled_from([1, 3, 8, 24]),
)
def test_any_failing_rows_end_in_the_output_exactly_once_after_retries(failing, again, batch_size):
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model = Flaky(tmp / "failing.json")
        job = _job(model, rows=24, batch_size=batch_size)
        out, errors = tmp / "out", tmp / "errors.parquet"
        model.fail(sorted(failing))
        job.write_parquet(str(out), errors_to=str(errors))
        assert sorted(pq.read_table(errors)["id"].to_pylist()) == sorted(failing)
        assert _ids(out) == sorted(set(range(24)) - failing)
        still = failing & again
        model.fail(sorted(still))
        job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
        assert sorted(pq.read_table(errors)["id"].to_pylist()) == sorted(still)
        assert _ids(out) == sorted(set(range(24)) - still)


def test_a_resumed_write_keeps_the_rows_it_had_skipped_in_its_ledger(tmp_path):
    model = Flaky(tmp_path / "failing.json")
    model.fail([5])
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"

    def stops(batch: pa.Table) -> pa.Table:
        if (tmp_path / "stop").exists() and 33 in batch["id"].to_pylist():
            raise RuntimeError("preempted")
        return batch.select(["id", "y"])

    job = _job(model).map_batches(stops, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=8)
    (tmp_path / "stop").touch()
    with pytest.raises(UDFError):
        job.write_parquet(str(out), resume=True, errors_to=str(errors))
    (tmp_path / "stop").unlink()
    model.fail([])  # the saved answers are taken: row 5 stays skipped, with its error
    result = job.write_parquet(str(out), resume=True, errors_to=str(errors))
    assert result.steps[0].rows_resumed > 0
    assert pq.read_table(errors).select(["id", "error_message"]).to_pylist() == [
        {"id": 5, "error_message": "model down for id 5"}
    ]


def test_mistakes_are_refused_with_what_to_do(tmp_path):
    model = Flaky(tmp_path / "failing.json")
    out, errors = str(tmp_path / "out"), str(tmp_path / "errors.parquet")
    plain = vane.range(4).map_batches(**model.as_step(), schema={"id": "BIGINT", "y": "BIGINT"})
    with pytest.raises(ConfigurationError, match="no step of this pipeline keeps going"):
        plain.write_parquet(out, errors_to=errors)
    job = _job(model)
    with pytest.raises(LedgerError, match="is a directory"):
        job.write_parquet(out, errors_to=str(tmp_path))
    with pytest.raises(LedgerError, match="lies in the output"):
        job.write_parquet(out, errors_to=f"{out}/errors.parquet")
    with pytest.raises(LedgerError, match="this machine's disk"):
        job.write_parquet(out, errors_to="s3://bucket/errors.parquet")
    with pytest.raises(ConfigurationError, match="pass errors_to="):
        job.write_parquet(out, errors_key="id")
    with pytest.raises(ConfigurationError, match="no input column 'nope'"):
        job.write_parquet(out, errors_to=errors, errors_key=["nope"])
    clash = (
        vane.range(4)
        .select("id AS step")
        .map_batches(lambda b: b, schema={"step": "BIGINT"}, on_error="skip")
    )
    with pytest.raises(ConfigurationError, match="name of a ledger column"):
        clash.write_parquet(out, errors_to=errors)
    assert not os.path.exists(out) and not os.path.exists(errors)

    with pytest.raises(LedgerError, match="no error ledger there"):
        job.retry_failed(errors)
    pq.write_table(pa.table({"id": [1]}), errors)
    with pytest.raises(LedgerError, match="not an error ledger"):
        job.retry_failed(errors)
    model.fail([1])
    job.write_parquet(out, errors_to=errors)
    other = (
        vane.range(40)
        .select("id", "id % 3 AS k")
        .map_batches(lambda b: b, schema={"id": "BIGINT", "k": "BIGINT"}, on_error="skip")
    )
    with pytest.raises(LedgerError, match="another pipeline: its step `Flaky`"):
        other.retry_failed(errors)
    with pytest.raises(LedgerError, match="must replace that ledger as it commits"):
        job.retry_failed(errors).write_parquet(out, mode="append")
    with pytest.raises(LedgerError, match="needs all rows at once"):
        job.aggregate("count(*) AS n").retry_failed(errors)


@pytest.mark.parametrize("fmt", ["deltalake", "lance"])
def test_table_formats_commit_a_ledger_and_take_a_retry_as_a_new_version(tmp_path, fmt):
    pytest.importorskip(fmt)
    model = Flaky(tmp_path / "failing.json")
    model.fail([6])
    table, errors = str(tmp_path / "table"), str(tmp_path / "errors.parquet")
    job = _job(model, rows=12)
    getattr(job, f"write_{fmt}")(table, errors_to=errors)
    assert pq.read_table(errors)["id"].to_pylist() == [6]
    model.fail([])
    getattr(job.retry_failed(errors), f"write_{fmt}")(table, mode="append", errors_to=errors)
    read = getattr(vane, f"read_{fmt}")
    assert sorted(r["id"] for r in read(table).to_pylist()) == list(range(12))
    assert pq.read_table(errors).num_rows == 0


def test_a_ledger_older_than_its_output_is_never_retried(tmp_path):
    """A write killed between its output's commit and its ledger's leaves the output with the
    ledger before it (as restoring that ledger does here): its rows may be in the output, so
    a retry of it is refused; so is a retry into another output."""
    model = Flaky(tmp_path / "failing.json")
    out, errors = tmp_path / "out", tmp_path / "errors.parquet"
    job = _job(model, rows=16)
    model.fail([2, 12])
    job.write_parquet(str(out), errors_to=str(errors))
    old = errors.read_bytes()
    with pytest.raises(LedgerError, match="Retry into the output the ledger goes with"):
        job.retry_failed(str(errors)).write_parquet(
            str(tmp_path / "elsewhere"), errors_to=str(errors)
        )
    model.fail([12])
    job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
    assert _ids(out) == [i for i in range(16) if i != 12]
    errors.write_bytes(old)  # as if the ledger's rename had not happened
    with pytest.raises(LedgerError, match="has changed since the ledger"):
        job.retry_failed(str(errors)).write_parquet(str(out), mode="append", errors_to=str(errors))
    assert _ids(out) == [i for i in range(16) if i != 12]  # row 2 is not added twice


def test_a_rerun_with_retry_failed_true_retries_the_ledgers_rows(tmp_path):
    """``write_*(retry_failed=True)`` is ``retry_failed(errors_to)`` written; with
    ``resume=True`` the retry keeps its answers as it goes, as any resumable write."""
    model = Flaky(tmp_path / "failing.json")
    out, errors = str(tmp_path / "out"), str(tmp_path / "errors.parquet")
    job = _job(model, rows=20)
    model.fail([1, 11])
    job.write_parquet(out, errors_to=errors, resume=True)
    with pytest.raises(ConfigurationError, match="pass errors_to="):
        job.write_parquet(out, mode="append", retry_failed=True)
    with pytest.raises(ConfigurationError, match="pass mode='append'"):
        job.write_parquet(out, errors_to=errors, retry_failed=True)
    model.fail([11])
    options = {"mode": "append", "errors_to": errors, "retry_failed": True, "resume": True}
    assert job.write_parquet(out, **options).rows == 1
    model.fail([])
    assert job.write_parquet(out, **options).rows == 1
    assert _ids(tmp_path / "out") == list(range(20))
    assert pq.read_table(errors).num_rows == 0
