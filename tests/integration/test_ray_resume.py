"""Resumable writes, budgets and the error ledger on the Ray runner: the same objects as on the
local runner (``Checkpoint``, ``Budget``, ``Ledger``), used by Ray actors and the driver.

The models count their calls in a file they append to (Ray's actors are other processes), and
fail while a file the test writes says so: a job that dies part-way, then runs again."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import vane
from vane.errors import BudgetExceededError, UDFError
from vane.io.resume import ResumeStore
from vane.testing import OpenAIServer

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ROWS, BATCH = 200, 20


class Preempted:
    """A model that logs the first id and the rows of each batch it is called with, and fails
    the batch that holds ``fail_at`` while ``broken`` exists (the machine preempted there)."""

    def __init__(self, calls: str, broken: str, fail_at: int) -> None:
        self.calls, self.broken, self.fail_at = calls, broken, fail_at

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        with open(self.calls, "a") as log:
            log.write(f"{ids[0]} {len(ids)}\n")
        if self.fail_at in ids and Path(self.broken).exists():
            raise RuntimeError("the machine was preempted")
        return pa.table({"id": batch["id"], "score": pc.multiply(batch["id"], 3)})


def _logged(path: Path) -> dict[int, int]:
    """Each call's batch: its first id, and its rows (a batch called twice: a failure)."""
    calls = [tuple(map(int, line.split())) for line in path.read_text().splitlines()]
    batches = dict(calls)
    assert len(batches) == len(calls), "a batch was sent to the model twice in one run"
    return batches


def _kept(destination: Path) -> list[pa.Table]:
    """The answers a resumable write to ``destination`` keeps, read as a rerun reads them."""
    store = ResumeStore(str(destination), "test")
    answers = [store.get(step, digest) for step, digest in store.kept()]
    return [saved.table for saved in answers if saved is not None]


def _saved(destination: Path) -> dict[int, int]:
    """The batches a resumable write keeps answers of: first id, rows."""
    return {t["id"][0].as_py(): t.num_rows for t in _kept(destination)}


def test_a_ray_job_that_died_part_way_pays_again_only_for_unanswered_batches(on_ray, tmp_path):
    calls, broken = tmp_path / "calls.log", tmp_path / "broken"
    broken.touch()
    out = tmp_path / "out"
    job = (
        vane.range(ROWS)
        .select("id", "id * 2 AS twice")  # a row-local step on Ray before the model
        .map_batches(
            Preempted,
            fn_constructor_args=(str(calls), str(broken), 120),
            schema={"id": "BIGINT", "score": "BIGINT"},
            batch_size=BATCH,
        )
    )
    with pytest.raises(RuntimeError, match="preempted") as raised:
        job.write_parquet(str(out), resume=True)
    assert isinstance(raised.value, UDFError)  # as the local runner raises it
    assert not out.exists()  # nothing committed
    saved, first_run = _saved(out), _logged(calls)
    # the batches before the failing one were answered (one actor, in order), and kept
    assert sum(saved.values()) >= 100
    assert saved.keys() <= first_run.keys()

    broken.unlink()
    calls.unlink()
    result = job.write_parquet(str(out), resume=True)
    second_run = _logged(calls)
    # The model was asked only for the batches no run had kept: Ray cut the input the same way
    # again, every saved answer was used, and the rest was asked once.
    assert not saved.keys() & second_run.keys()
    # (Ray kills the failed run's actor asynchronously: it may keep one more answer after the
    # error has reached the driver, and the rerun uses that one too)
    resumed = result.steps[0].rows_resumed
    assert sum(saved.values()) <= resumed
    assert sum(second_run.values()) + resumed == ROWS
    assert any(first <= 120 < first + rows for first, rows in second_run.items())
    rows = vane.read_parquet(str(out)).to_pylist()
    assert rows == [{"id": i, "score": 3 * i} for i in range(ROWS)]  # each row once, in order
    assert not (tmp_path / ".out.vane-resume").exists()  # the saved work has served


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    running = OpenAIServer().start()
    yield running
    running.stop()


def test_a_budget_stops_a_ray_prompt_job_keeping_every_answer_it_paid_for(on_ray, server, tmp_path):
    # 60 batches of five: more than the two actors hold at once (16 calls each, as the local
    # runner's actors), so the budget stops the job with batches still unsent; both actors
    # answer, and the tally sums them
    total = 300
    questions = vane.range(total).select("id", "'question number ' || id AS q")
    out = tmp_path / "out"

    def job(budget: int) -> vane.Relation:
        return questions.prompt(
            "q",
            base_url=server.base_url,
            model="m",
            batch_size=5,
            concurrency=2,
            max_total_tokens=budget,
        )

    before = server.requests
    # The test server counts 8 tokens a row (3 words asked, 5 answered): 40 a batch of five.
    with pytest.raises(BudgetExceededError, match=r"past its budget \(max_total_tokens=100\)"):
        job(100).write_parquet(str(out), resume=True)
    asked = server.requests - before
    assert 15 <= asked < total  # the third batch passed it; the actors stopped sending
    kept = sum(answer.num_rows for answer in _kept(out))
    assert kept == asked  # every answer paid for, those in flight too, is kept

    before = server.requests
    result = job(100_000).write_parquet(str(out), resume=True)
    assert server.requests - before == total - kept  # only the rows no run had answered
    assert result.rows == total
    answers = vane.read_parquet(str(out)).to_pylist()
    assert [r["id"] for r in answers] == list(range(total))
    assert all(r["response"] == f"answer to: question number {r['id']}" for r in answers)


class Flaky:
    """Fails the ids listed in a JSON file, whatever batch they are in; doubles the others."""

    def __init__(self, failing: str) -> None:
        self.failing = failing

    def __call__(self, batch: pa.Table) -> pa.Table:
        bad = set(json.loads(Path(self.failing).read_text()))
        hit = [i for i in batch["id"].to_pylist() if i in bad]
        if hit:
            raise ValueError(f"model down for id {hit[0]}")
        return batch.append_column("y", pc.multiply(batch["id"], 2))


def _flaky_job(failing: Path) -> vane.Relation:
    return (
        vane.range(40)
        .select("id", "id % 3 AS k")
        .map_batches(
            Flaky,
            fn_constructor_args=(str(failing),),
            schema={"id": "BIGINT", "k": "BIGINT", "y": "BIGINT"},
            batch_size=8,
            on_error="skip",
        )
    )


def _sorted(table: pa.Table, *, attempts: bool = True) -> list[dict[str, object]]:
    rows = sorted(table.to_pylist(), key=lambda r: (r["id"], r["step"]))
    return rows if attempts else [{k: v for k, v in r.items() if k != "attempts"} for r in rows]


def test_errors_to_on_ray_gives_the_ledger_the_local_runner_gives(ray_cluster, tmp_path):
    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps([3, 17, 18]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the steps warn about the rows skipped
        vane.configure(runner="local")
        _flaky_job(failing).write_parquet(
            str(tmp_path / "local"), errors_to=str(tmp_path / "local.parquet")
        )
        vane.configure(runner="ray")
        try:
            result = _flaky_job(failing).write_parquet(
                str(tmp_path / "ray"), errors_to=str(tmp_path / "ray.parquet")
            )
            assert result.rows == 37
            local, on_ray = (pq.read_table(tmp_path / f"{n}.parquet") for n in ("local", "ray"))
            assert on_ray.schema == local.schema  # its metadata (steps, keys) included
            # The same rows, steps and errors. (The attempts count the calls a row was in,
            # bisection included, which depend on where Ray cut its blocks into batches.)
            assert _sorted(on_ray, attempts=False) == _sorted(local, attempts=False)
            assert [r["id"] for r in _sorted(on_ray)] == [3, 17, 18]
            assert all(1 < r["attempts"] <= 4 for r in on_ray.to_pylist())

            # The model is back but for id 18: a retry on Ray adds the rows that succeed.
            failing.write_text(json.dumps([18]))
            retry = _flaky_job(failing).retry_failed(str(tmp_path / "ray.parquet"))
            again = retry.write_parquet(
                str(tmp_path / "ray"), mode="append", errors_to=str(tmp_path / "ray.parquet")
            )
            assert again.rows == 2
            assert pq.read_table(tmp_path / "ray.parquet")["id"].to_pylist() == [18]
            ids = sorted(r["id"] for r in vane.read_parquet(str(tmp_path / "ray")).to_pylist())
            assert ids == sorted(set(range(40)) - {18})
        finally:
            vane.configure(runner="local")


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_errors_to_beside_a_single_file_output_on_ray(on_ray, tmp_path, fmt):
    # A single-file output is written whole on the driver, the ledger committed with it.
    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps([5, 30]))
    out, ledger = tmp_path / f"out.{fmt}", tmp_path / "errors.parquet"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the step warns about the rows skipped
        result = getattr(_flaky_job(failing), f"write_{fmt}")(str(out), errors_to=str(ledger))
    assert result.rows == 38 and out.is_file()
    read = getattr(vane, f"read_{fmt}")(str(out)).to_arrow()
    assert sorted(read["id"].to_pylist()) == sorted(set(range(40)) - {5, 30})
    assert sorted(pq.read_table(ledger)["id"].to_pylist()) == [5, 30]
