"""Resumable writes (``write_*(..., resume=True)``): a job killed at any instant, rerun, pays
only for the batches no run had kept, and its output holds every row once, in order.

The jobs are real processes killed with SIGKILL once their model has answered a number of
batches drawn at random (a fixed seed per test, so a failure reproduces); the model writes a
line per call to a log that survives the kill, which counts what each run paid for."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import vane
from vane.errors import ResumeError
from vane.execution import stage
from vane.io import parts
from vane.io.resume import ResumeStore

ROOT = Path(__file__).resolve().parents[2]
ROWS, BATCH = 1_200, 40
BATCHES = ROWS // BATCH

JOB = (
    textwrap.dedent(
        """
    import sys, threading
    import pyarrow as pa, pyarrow.compute as pc
    import vane
    from tests.integration.kill_jobs import log_call

    vane.configure(progress=False)
    out, calls, backend, fmt, hang_at = sys.argv[1:6]
    made = []

    def model(batch):
        log_call(calls, batch)  # on disk before the answer leaves: a kill loses no count
        made.append(1)
        if len(made) == int(hang_at):  # this run's call that the kill will find running
            threading.Event().wait()
        return pa.table({"id": batch["id"], "y": pc.multiply(batch["id"], 3)})

    rel = vane.range(ROWS).map_batches(
        model, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=BATCH,
        execution_backend=backend,
    )
    result = getattr(rel.filter("y % 2 = 0"), "write_" + fmt)(out, resume=True)
    print("resumed", result.steps[0].rows_resumed)
    """
    )
    .replace("ROWS", str(ROWS))
    .replace("BATCH", str(BATCH))
)


@pytest.fixture(autouse=True)
def _every_answer_kept(monkeypatch):
    """These tests are of the answer log: where a write also keeps its output's parts, a quick
    function's answers are not kept in it (``io/parts.py``, tested in test_resume_parts.py);
    here every answer is, however quick."""
    monkeypatch.setattr(parts, "KEEP_RATIO", 0.0)


def _job(out: Path, calls: Path, backend: str, hang_at: int = 0) -> subprocess.Popen[str]:
    """The job, whose model hangs at its ``hang_at``-th call of this run (0: never)."""
    return subprocess.Popen(
        [sys.executable, "-c", JOB, str(out), str(calls), backend, "parquet", str(hang_at)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its worker processes die with it
    )


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _kill_after(job: subprocess.Popen[str], log: Path, calls: int) -> None:
    """SIGKILL the job (and its workers) once its model has been called ``calls`` times in
    all: its last call hangs there, so the kill finds it running, however busy the machine."""
    while _calls(log) < calls:
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.wait(timeout=0.05)
        assert job.poll() is None, job.communicate()[1]  # it cannot end: one call never does
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def _saved(out: Path) -> int:
    return sum(1 for _ in ResumeStore(str(out), "test").kept())


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("backend", "seed"), [("thread", 1), ("subprocess_actor", 2)])
def test_a_job_killed_again_and_again_pays_once_per_batch_and_writes_each_row_once(
    tmp_path, backend, seed
):
    draw = random.Random(seed)
    out, log = tmp_path / "out", tmp_path / "calls.log"
    for _ in range(4):  # four kills, each at a random point of what is left
        left = BATCHES - _saved(out)
        hang_at = draw.randint(1, min(BATCHES // 5, left - 1))
        _kill_after(_job(out, log, backend, hang_at), log, _calls(log) + hang_at)
        assert not out.exists()  # a killed job leaves no output
    saved = _saved(out)
    before = _calls(log)
    done = _job(out, log, backend)
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    # The last run paid for exactly the batches no killed run had kept, and said so.
    assert _calls(log) - before == BATCHES - saved
    assert f"resumed {saved * BATCH}" in stdout
    rows = vane.read_parquet(str(out)).to_arrow()
    assert rows["id"].to_pylist() == [i for i in range(ROWS) if (i * 3) % 2 == 0]  # once, in order
    assert not (tmp_path / ".out.vane-resume").exists()  # committed: the saved work is gone


def test_a_changed_pipeline_is_refused_saying_what_changed_and_restart_starts_over(tmp_path):
    calls: list[int] = []
    broken = [True]

    def score(batch: pa.Table) -> pa.Table:
        calls.append(batch["id"][0].as_py())
        if broken[0] and batch["id"][0].as_py() == 20:
            raise RuntimeError("the machine went away")
        return batch

    def other(batch: pa.Table) -> pa.Table:
        calls.append(-batch.num_rows)
        return batch

    def job(fn):
        return vane.range(100).map_batches(fn, schema={"id": "BIGINT"}, batch_size=10)

    out = str(tmp_path / "out")
    with pytest.raises(RuntimeError, match="went away"):
        job(score).write_parquet(out, resume=True)
    assert not Path(out).exists()
    with pytest.raises(ResumeError, match="the pipeline is not the one") as info:
        job(other).write_parquet(out, resume=True)
    said = str(info.value)
    assert "other` is new" in said and "score` is gone" in said and "resume='restart'" in said
    calls.clear()
    done = job(other).write_json(out, resume="restart")
    assert done.rows == 100 and calls == [-10] * 10
    # The same pipeline again: what the failed run kept answers its first two batches, and
    # any later one answered before the failure stopped it (answers are kept as they come).
    again = str(tmp_path / "again")
    with pytest.raises(RuntimeError, match="went away"):
        job(score).write_csv(again, resume=True)
    calls.clear()
    broken[0] = False
    result = job(score).write_csv(again, resume=True)
    resumed = result.steps[0].rows_resumed
    assert result.rows == 100 and 20 in calls and not {0, 10} & set(calls)
    assert len(calls) == len(set(calls)) == 10 - resumed // 10  # every other batch, once
    assert resumed >= 20 and f"{resumed} answered by the saved run" in str(result.steps[0])


def _quick_model(fails_from: int) -> tuple[Callable[[pa.Table], pa.Table], list[int], list[bool]]:
    """A quick model doubling ``id``; it notes each call's first id in ``calls`` and, while
    ``broken[0]``, fails each call from the one beginning at ``fails_from``."""
    calls: list[int] = []
    broken = [True]

    def score(batch: pa.Table) -> pa.Table:
        first = batch["id"][0].as_py()
        calls.append(first)
        if broken[0] and first >= fails_from:
            raise RuntimeError("the machine went away")
        return pa.table({"id": batch["id"], "y": pc.multiply(batch["id"], 2)})

    return score, calls, broken


def _failed_then_resumed(
    rel: vane.Relation, out: str, calls: list[int], broken: list[bool]
) -> vane.WriteResult:
    """A resumable write that fails part-way, then its rerun with the model mended: what the
    rerun wrote (``calls`` holds only the rerun's calls)."""
    with pytest.raises(RuntimeError, match="went away"):
        rel.write_parquet(out, resume=True)
    calls.clear()
    broken[0] = False
    return rel.write_parquet(out, resume=True)


def test_a_quick_functions_units_are_kept_batch_by_batch(tmp_path, monkeypatch):
    """A quick function's batches travel in units of several (``vane.execution.stage``); a
    resumable write keeps each batch's answer on its own, those before a call that failed
    part-way through a unit included, so a rerun pays for each batch no run answered, once."""
    monkeypatch.setattr(stage, "UNIT_SECONDS", 3600.0)  # every call is quick: the largest units
    score, calls, broken = _quick_model(fails_from=500)
    rel = vane.range(1_000).map_batches(
        score, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=10
    )
    out = str(tmp_path / "out")
    result = _failed_then_resumed(rel, out, calls, broken)
    resumed = result.steps[0].rows_resumed
    assert resumed >= 500  # every batch before the failing one was kept
    assert 500 in calls and min(calls) >= 500 and len(calls) == len(set(calls))
    assert len(calls) == 100 - resumed // 10  # each batch no run kept, once
    rows = vane.read_parquet(out).to_arrow()
    assert rows["id"].to_pylist() == list(range(1_000))
    assert rows["y"].to_pylist() == [2 * i for i in range(1_000)]


def test_saved_answers_keep_what_on_error_did_to_them(tmp_path):
    stop = [True]

    def picky(row: dict) -> dict:
        if row["id"] % 7 == 3:
            raise ValueError(f"no score for {row['id']}")
        return {"id": row["id"], "score": row["id"] / 2}

    def downstream(batch: pa.Table) -> pa.Table:
        if stop[0] and 42 in batch["id"].to_pylist():
            raise RuntimeError("the job stops here")
        return batch

    out = str(tmp_path / "out")
    rel = vane.range(60).map(
        picky, schema={"id": "BIGINT", "score": "DOUBLE"}, batch_size=5, on_error="null"
    )
    rel = rel.map_batches(
        downstream, schema={"id": "BIGINT", "score": "DOUBLE", "error": "VARCHAR"}, batch_size=5
    )
    with pytest.raises(RuntimeError, match="stops here"):
        rel.write_parquet(out, resume=True)
    stop[0] = False
    with pytest.warns(UserWarning, match="kept 9 failing rows as nulls"):
        result = rel.write_parquet(out, resume=True)
    picked = next(s for s in result.steps if s.step.endswith("picky"))
    assert picked.rows_resumed >= 40 and picked.rows_nulled == 9
    rows = vane.read_parquet(out).to_pylist()  # in order; a failed row is all nulls but why
    assert len(rows) == 60
    for i, row in enumerate(rows):
        if i % 7 == 3:
            assert row["id"] is None and row["error"] == f"ValueError: no score for {i}"
        else:
            assert row == {"id": i, "score": i / 2, "error": None}


def test_column_udfs_resume_on_the_columns_they_read(tmp_path):
    calls: list[int] = []

    @vane.func(batch_size=10)
    def shout(text: str) -> str:
        calls.append(1)
        if os.environ.get("VANE_TEST_FAIL") and len(calls) > 30:
            raise RuntimeError("interrupted")
        return text.upper()

    rel = (
        vane.range(80)
        .with_column("text", "'row ' || id")
        .with_column("loud", shout(vane.col("text")))
    )
    out = str(tmp_path / "out")
    os.environ["VANE_TEST_FAIL"] = "1"
    try:
        with pytest.raises(Exception, match="interrupted"):
            rel.write_parquet(out, resume=True)
    finally:
        del os.environ["VANE_TEST_FAIL"]
    paid = len(calls)
    rel.write_parquet(out, resume=True)
    # The batches answered before the failure (30 rows at least) were not paid for again.
    assert len(calls) - paid <= 50
    rows = vane.read_parquet(out).order_by("id").to_pylist()
    assert [r["loud"] for r in rows] == [f"ROW {i}" for i in range(80)]


@vane.cls(batch_size=2)
class Scorer:
    def __init__(self, weight: float) -> None:
        self.weight = weight

    def __call__(self, value: int) -> float:
        if self.weight > 10 and value >= 6:
            raise RuntimeError("too heavy")
        return value * self.weight


def test_a_class_udf_constructed_with_other_arguments_is_another_pipeline(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(Exception, match="too heavy"):  # (after the answers to rows 0-5 are kept)
        vane.range(10).with_column("s", Scorer(11.0)(vane.col("id"))).write_parquet(
            out, resume=True
        )
    # Other constructor arguments give other answers: the saved ones must not be taken.
    with pytest.raises(ResumeError, match="changed"):
        vane.range(10).with_column("s", Scorer(2.0)(vane.col("id"))).write_parquet(out, resume=True)


# ---- batches known by their place in the input, where every run gives it alike --------------


def test_a_file_jobs_batches_are_known_by_their_place_and_never_hashed(tmp_path, monkeypatch):
    """Over files read as they are (and row-by-row SQL), a batch's answer is kept under its
    place in the input: a rerun pays for each batch no run kept, and no batch is hashed."""
    from vane.execution import resume

    def no_digest(shipped: pa.Table) -> str:
        raise AssertionError("a batch of a file job was hashed")

    monkeypatch.setattr(resume, "batch_digest", no_digest)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(600))}), source)
    score, calls, broken = _quick_model(fails_from=300)
    rel = (
        vane.read_parquet(str(source))
        .filter("id % 2 = 0")
        .with_column("id", "id + 1")
        .map_batches(score, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=10)
    )
    out = str(tmp_path / "out")
    result = _failed_then_resumed(rel, out, calls, broken)
    resumed = result.steps[0].rows_resumed
    assert resumed >= 150  # every batch before the failing one was kept
    assert min(calls) >= 300 and len(calls) == len(set(calls)) == 30 - resumed // 10
    rows = vane.read_parquet(out).to_arrow()
    assert rows["id"].to_pylist() == list(range(1, 600, 2))
    assert rows["y"].to_pylist() == [2 * i for i in range(1, 600, 2)]


_seen: list[int] = []


@vane.func(batch_size=10)
def _doubled(r: float) -> float:
    _seen.append(1)
    if os.environ.get("VANE_TEST_FAIL") and len(_seen) > 100:
        raise RuntimeError("interrupted")
    return r * 2


def _fail_once(run):
    _seen.clear()
    os.environ["VANE_TEST_FAIL"] = "1"
    try:
        with pytest.raises(Exception, match="interrupted"):
            run()
    finally:
        del os.environ["VANE_TEST_FAIL"]


def test_an_input_that_differs_from_run_to_run_is_never_answered_from_another_run(tmp_path):
    """Where the rows below a step may differ between runs (random(), an in-memory table given
    anew), an answer is taken again only for the same values: each row's answer is its own."""
    out = tmp_path / "random"
    rel = vane.range(300).with_column("r", "random()").with_column("y", _doubled(vane.col("r")))
    _fail_once(lambda: rel.write_parquet(str(out), resume=True))
    rel.write_parquet(str(out), resume=True)
    rows = vane.read_parquet(str(out)).to_pylist()
    assert len(rows) == 300 and all(row["y"] == 2 * row["r"] for row in rows)

    out = tmp_path / "memory"

    def memory(values: list[float]) -> vane.Relation:
        table = vane.from_pydict({"id": list(range(300)), "r": values})
        return table.with_column("y", _doubled(vane.col("r")))

    _fail_once(lambda: memory([float(i) for i in range(300)]).write_parquet(str(out), resume=True))
    memory([float(-i) for i in range(300)]).write_parquet(str(out), resume=True)
    rows = vane.read_parquet(str(out)).to_pylist()
    assert [row["y"] for row in rows] == [-2.0 * i for i in range(300)]


_run = ["first"]
_loud_calls: list[int] = []


@vane.func(batch_size=10)
def _tag(i: int) -> str:
    return f"{_run[0]}-{i}"


@vane.func(batch_size=10)
def _loud(text: str) -> str:
    _loud_calls.append(1)
    if _run[0] == "first" and len(_loud_calls) > 100:
        raise RuntimeError("interrupted")
    return text.upper()


def test_a_step_above_another_udf_is_answered_by_its_values(tmp_path):
    """A step above a UDF step is given what that step answered; if the step below answers
    anew (its kept answers lost, or a model that answers otherwise), the step above must not
    take its answer for the same place."""
    _run[0] = "first"
    _loud_calls.clear()
    rel = vane.range(300).with_column("t", _tag(vane.col("id")))
    rel = rel.with_column("y", _loud(vane.col("t")))
    out = tmp_path / "out"
    with pytest.raises(Exception, match="interrupted"):
        rel.write_parquet(str(out), resume=True)
    store = tmp_path / ".out.vane-resume"
    lost = [p for p in store.iterdir() if p.is_dir() and p.name.startswith("_tag")]
    assert len(lost) == 1, sorted(p.name for p in store.iterdir())
    shutil.rmtree(lost[0])  # the step below answers anew
    _run[0] = "second"
    rel.write_parquet(str(out), resume=True)
    rows = vane.read_parquet(str(out)).to_pylist()
    assert [row["y"] for row in rows] == [f"SECOND-{i}" for i in range(300)]


_loading = threading.Event()
_broken = [True]


class _Model:
    """A model whose load the test watches; it fails at row 300 while ``_broken``."""

    def __init__(self) -> None:
        _loading.set()

    def __call__(self, batch: pa.Table) -> pa.Table:
        if _broken[0] and batch["id"][0].as_py() >= 300:
            raise RuntimeError("the machine went away")
        return pa.table({"id": batch["id"], "y": pc.multiply(batch["id"], 2)})


def test_a_rerun_loads_its_model_while_it_reads_the_kept_answers(tmp_path, monkeypatch):
    """A rerun whose saved work surely lacks answers starts its actors (its model's load)
    at once, beside the stage reading the kept answers, rather than after them: the reading
    of the second kept answer is held until the load has begun, and goes on."""
    from vane.execution import resume

    rel = vane.range(600).map_batches(_Model, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=10)
    out = str(tmp_path / "out")
    _broken[0] = True
    with pytest.raises(RuntimeError, match="went away"):
        rel.write_parquet(out, resume=True)
    _broken[0] = False
    _loading.clear()
    asked: list[bool] = []
    get = resume.Checkpoint.get

    def held(self, key):
        if len(asked) == 1:  # the second answer asked for, which a run kept
            asked.append(_loading.wait(timeout=120))  # (only a broken stage waits this out)
        else:
            asked.append(True)
        return get(self, key)

    monkeypatch.setattr(resume.Checkpoint, "get", held)
    result = rel.write_parquet(out, resume=True)
    assert result.steps[0].rows_resumed >= 300 and all(asked)
    rows = vane.read_parquet(out).to_arrow()
    assert rows["y"].to_pylist() == [2 * i for i in range(600)]


@pytest.mark.parametrize("refused_by", ["the sink", "the saved work"])
def test_a_resumable_write_refused_at_once_exits_with_its_error_not_an_abort(tmp_path, refused_by):
    """A resumable write asks DuckDB's settings on a thread as it begins; refused before it
    reads them (a type the sink cannot hold, another pipeline's saved work), it waits for that
    query, so that a script whose error goes uncaught exits with it, not with an abort from a
    thread the exiting interpreter stopped inside DuckDB."""
    out = tmp_path / ("out.csv" if refused_by == "the sink" else "out")
    if refused_by == "the saved work":
        saved = ResumeStore(str(out), "write_parquet")
        saved.open({"plan": "another pipeline", "steps": {}, "inputs": {}}, restart=False)
        saved.make()
        saved.close()  # (a run that ended: refused for its pipeline, not as running)
    write = "write_csv" if refused_by == "the sink" else "write_parquet"
    script = textwrap.dedent(
        f"""
        import vane
        vane.configure(progress=False)
        rel = vane.range(10).with_column("v", "[id, id]")
        rel.{write}({str(out)!r}, resume=True)
        """
    )
    for _ in range(3):  # (the abort came in 59 of 60 runs without the wait)
        done = subprocess.run(
            [sys.executable, "-c", script], check=False, capture_output=True, text=True
        )
        assert done.returncode == 1, done.stderr[-2000:]
        said = "ConfigurationError" if refused_by == "the sink" else "is not the one whose work"
        assert said in done.stderr
