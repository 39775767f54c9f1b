"""A resumable write's output parts as its durable increments (``vane/io/parts.py``): a rerun
takes the parts a killed run closed and recorded, skips their input rows (never sent to the
function again), and the output holds every row once, in order, whatever instant the kill
came at; a quick function's answers are not kept twice (in the answer log and the output).

The jobs are real processes, killed with SIGKILL while their model hangs in a call (so a busy
machine cannot move the kill), or held by the ``VANE_COMMIT_PAUSE`` hook at each step of a
part's protocol and killed there. The model writes a line per call to a log that survives the
kill, which counts what each run paid for."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import vane
from vane.io import parts
from vane.io.parts import JOURNAL, Mark, Marks, Parts, _line
from vane.io.sinks import FileSink

ROOT = Path(__file__).resolve().parents[2]
ROWS, BATCH = 20_000, 200
BATCHES = ROWS // BATCH

JOB = (
    textwrap.dedent(
        """
    import sys, threading
    import pyarrow as pa, pyarrow.compute as pc
    import vane
    from tests.integration.kill_jobs import log_call
    from vane.execution import stage
    from vane.io import parts

    out, calls, backend, fmt, hang_at, part_bytes, keep_ratio, chain, drop, fail = sys.argv[1:11]
    if drop == "no":  # (each call its own unit: a hung call holds no answered one)
        stage.MAX_UNIT_CALLS = 1
    parts.PART_BYTES = int(part_bytes)
    parts.KEEP_RATIO = float(keep_ratio)
    vane.configure(progress=False, batch_size=100)  # (DuckDB's batches, above the step)
    made = []

    def model(batch):
        log_call(calls, batch)  # on disk before the answer leaves: a kill loses no count
        made.append(1)
        if len(made) == int(hang_at):  # this run's call that the kill will find running
            threading.Event().wait()
        if fail == "yes" and pc.any(pc.equal(pc.remainder(batch["id"], 97), 0)).as_py():
            raise ValueError("a row the model cannot answer")  # (skipped: on_error below)
        if drop == "yes":  # fewer rows out than in: a part's input and output rows differ
            batch = batch.filter(pc.not_equal(pc.bit_wise_and(batch["id"], 7), 0))
        return pa.table({"id": batch["id"], "y": pc.multiply(batch["id"], 3)})

    rel = vane.range(ROWS).map_batches(
        model, schema={"id": "BIGINT", "y": "BIGINT"}, batch_size=BATCH,
        execution_backend=backend, on_error="skip" if fail == "yes" else "raise",
    )
    if chain == "sql":  # a step above it, run by DuckDB, that keeps each row as one
        rel = rel.with_column("z", vane.sql_expr("y + 1"))
    result = getattr(rel, "write_" + fmt)(out, resume=True)
    step = result.steps[0]
    print("resumed", step.rows_resumed, "rows", result.rows, "skipped", step.rows_skipped)
    """
    )
    .replace("ROWS", str(ROWS))
    .replace("BATCH", str(BATCH))
)


def _job(
    out: Path,
    calls: Path,
    *,
    backend: str = "thread",
    fmt: str = "parquet",
    hang_at: int = 0,
    part_bytes: int = 20_000,
    keep_ratio: float = float("inf"),
    chain: str = "none",
    pause: str = "",
    drop: str = "no",
    fail: str = "no",
) -> subprocess.Popen[str]:
    """The job, whose model hangs at its ``hang_at``-th call of this run (0: never); with
    ``keep_ratio`` inf, no answer is kept in the log (the parts alone
    keep the work), with 0 every one is."""
    args = [str(out), str(calls), backend, fmt, str(hang_at), str(part_bytes), str(keep_ratio)]
    return subprocess.Popen(
        [sys.executable, "-c", JOB, *args, chain, drop, fail],
        cwd=ROOT,
        env=dict(os.environ, VANE_COMMIT_PAUSE=pause),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its worker processes die with it
    )


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _kill_when(job: subprocess.Popen[str], ready: object) -> None:
    """SIGKILL the job (and its workers) once ``ready()`` says so; the job cannot end first."""
    while not ready():  # type: ignore[operator]
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.wait(timeout=0.05)
        assert job.poll() is None, job.communicate()[1]
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def _hung_with_a_part(out: Path, log: Path, hang_at: int) -> bool:
    """The job's model hangs at its ``hang_at``-th call and a part of its output is recorded:
    the answers before the hung one reach the writer however busy the machine (a kill at the
    hang alone may find them still on their way, and no part yet)."""
    return _calls(log) >= hang_at and bool(_recorded(out))


def _recorded(out: Path) -> list[dict[str, object]]:
    """The parts a run recorded (the journal's whole lines after its head)."""
    return parts.journal_records(out.parent / f".{out.name}.vane-resume" / JOURNAL)[1:]


def _finish(out: Path, log: Path, **options: object) -> tuple[int, int]:
    """Run the job to its end: (its model's calls, the rows it said it resumed)."""
    before = _calls(log)
    job = _job(out, log, **options)  # type: ignore[arg-type]
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    resumed = int(stdout.split("resumed ")[1].split()[0])
    if options.get("fail") != "yes":
        assert f"rows {len(_ids(str(options.get('drop', 'no'))))}" in stdout
    return _calls(log) - before, resumed


def _ids(drop: str) -> list[int]:
    return [i for i in range(ROWS) if drop != "yes" or i & 7]


def _check_output(out: Path, fmt: str = "parquet", drop: str = "no") -> None:
    rows = getattr(vane, f"read_{fmt}")(str(out)).to_arrow()
    assert rows["id"].to_pylist() == _ids(drop)  # every row once, in order
    assert rows["y"].to_pylist() == [3 * i for i in _ids(drop)]
    assert not (out.parent / f".{out.name}.vane-resume").exists()  # committed: work gone


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("backend", "chain", "drop", "seed"),
    [
        ("thread", "none", "no", 1),
        ("subprocess_actor", "none", "no", 2),
        ("thread", "sql", "no", 3),
        ("thread", "sql", "yes", 4),  # rows dropped by the function; units of several calls
    ],
)
def test_a_job_killed_again_and_again_skips_the_input_of_its_kept_parts(
    tmp_path, backend, chain, drop, seed
):
    draw = random.Random(seed)
    out, log = tmp_path / "out", tmp_path / "calls.log"
    skipped = 0
    for _ in range(3):  # three kills, each at a random point of what is left
        left = BATCHES - skipped // BATCH
        hang_at = draw.randint(3, max(3, min(left - 1, BATCHES // 3)))
        total = _calls(log) + hang_at
        job = _job(out, log, backend=backend, hang_at=hang_at, chain=chain, drop=drop)
        _kill_when(job, lambda total=total: _calls(log) >= total)
        assert not out.exists()  # a killed job leaves no output
        recorded = _recorded(out)
        now = int(recorded[-1]["input_end"]) if recorded else 0  # type: ignore[call-overload]
        assert now >= skipped  # a rerun's parts come after the ones it took
        skipped = now
    assert skipped > 0, "no part was closed: the test would not test the skip"
    calls, resumed = _finish(out, log, backend=backend, chain=chain, drop=drop)
    # The kept parts' input was never sent again; every other batch was, or came from the log.
    assert resumed >= skipped
    assert calls * BATCH + resumed == ROWS
    _check_output(out, drop=drop)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("step", ["parts-begun", "part-synced", "part-linked", "part-recorded"])
def test_a_kill_at_each_step_of_a_parts_protocol_loses_no_row_and_repeats_none(tmp_path, step):
    out, log = tmp_path / "out", tmp_path / "calls.log"
    marker = tmp_path / "paused"
    job = _job(out, log, pause=f"{step}:{marker}")
    _kill_when(job, marker.exists)
    recorded = _recorded(out)
    # Only a part whose record is whole is taken; one linked without it is dropped.
    assert len(recorded) == (1 if step == "part-recorded" else 0)
    calls, resumed = _finish(out, log)
    if recorded:
        assert resumed >= int(recorded[0]["input_end"])  # type: ignore[call-overload]
    assert calls * BATCH + resumed == ROWS
    _check_output(out)


@pytest.mark.timeout(300)
def test_csv_parts_each_keep_their_header_and_read_back_once(tmp_path):
    out, log = tmp_path / "out", tmp_path / "calls.log"
    _kill_when(_job(out, log, fmt="csv", hang_at=40), lambda: _hung_with_a_part(out, log, 40))
    assert _recorded(out)
    calls, resumed = _finish(out, log, fmt="csv")
    assert calls * BATCH + resumed == ROWS
    _check_output(out, "csv")


def test_with_every_answer_kept_a_rerun_pays_for_nothing_kept_either_way(tmp_path):
    """The parts and the answer log together: what a part holds is skipped, and the answers
    after it come from the log."""
    out, log = tmp_path / "out", tmp_path / "calls.log"
    job = _job(out, log, hang_at=40, keep_ratio=0)
    _kill_when(job, lambda: _hung_with_a_part(out, log, 40))
    assert _recorded(out)
    calls, resumed = _finish(out, log, keep_ratio=0)
    assert calls == BATCHES - 39  # the 39 answered calls were kept (parts or log); 40 hung
    assert resumed == 39 * BATCH
    _check_output(out)


@pytest.mark.timeout(300)
def test_a_rerun_says_the_rows_on_error_skipped_in_the_parts_it_took(tmp_path):
    out, log = tmp_path / "out", tmp_path / "calls.log"
    _kill_when(_job(out, log, hang_at=200, fail="yes"), lambda: _hung_with_a_part(out, log, 200))
    assert _recorded(out)
    job = _job(out, log, fail="yes")
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    failing = [i for i in range(ROWS) if i % 97 == 0]
    assert f"skipped {len(failing)}" in stdout  # those in the kept parts counted too
    rows = vane.read_parquet(str(out)).to_arrow()
    assert rows["id"].to_pylist() == [i for i in range(ROWS) if i % 97]


def test_parts_another_function_wrote_are_not_taken_even_without_the_pipelines_record(
    tmp_path, monkeypatch
):
    """The parts' record names the UDF step's function too: a folder whose pipeline.json is
    gone (a kill while a committed job's saved work was being removed) cannot hand one
    function's rows to another's job."""
    monkeypatch.setattr(parts, "PART_BYTES", 1)  # a part at every answer

    def halve(batch: pa.Table) -> pa.Table:
        if batch["id"][0].as_py() >= 500:
            raise RuntimeError("preempted")
        return pa.table({"id": batch["id"], "y": pc.divide(batch["id"], 2)})

    def double(batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"], "y": pc.multiply(batch["id"], 2)})

    def job(model: object) -> vane.Relation:
        schema = {"id": "BIGINT", "y": "BIGINT"}
        return vane.range(1_000).map_batches(model, schema=schema, batch_size=100)

    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="preempted"):
        job(halve).write_parquet(str(out), resume=True)
    assert _recorded(out)  # the first half is kept
    (tmp_path / ".out.vane-resume" / "pipeline.json").unlink()
    job(double).write_parquet(str(out), resume=True)
    rows = vane.read_parquet(str(out)).order_by("id").to_pylist()
    assert rows == [{"id": i, "y": 2 * i} for i in range(1_000)]


def test_parts_written_through_other_steps_above_are_not_taken(tmp_path, monkeypatch):
    """explain() shortens a long literal: the pipeline's fingerprint cannot tell two apart, the
    parts' record can (its rows went through the steps above the UDF step)."""
    monkeypatch.setattr(parts, "PART_BYTES", 1)  # a part at every answer
    failing = [True]

    def model(batch: pa.Table) -> pa.Table:
        if failing[0] and batch["id"][0].as_py() >= 500:
            raise RuntimeError("preempted")
        return batch

    def job(tag: str) -> vane.Relation:
        mapped = vane.range(1_000).map_batches(model, schema={"id": "BIGINT"}, batch_size=100)
        return mapped.with_column("tag", vane.lit(tag))

    out = tmp_path / "out"
    from vane.config import get_config

    size = get_config().batch_size
    vane.configure(batch_size=100)  # (the step above runs on blocks of this many rows)
    try:
        with pytest.raises(RuntimeError, match="preempted"):
            job("a" * 50).write_parquet(str(out), resume=True)
        assert _recorded(out)  # the first half is kept
        failing[0] = False
        job("b" * 50).write_parquet(str(out), resume=True)
    finally:
        vane.configure(batch_size=size)
    assert set(vane.read_parquet(str(out)).to_arrow()["tag"].to_pylist()) == {"b" * 50}


def test_an_async_or_counting_functions_answers_are_kept_however_quick(tmp_path, monkeypatch):
    """A call that awaits a server, or counts requests or tokens, is paid for: kept in the log
    even where parts are kept and the call took no time at all."""
    from vane.io.resume import ResumeStore

    monkeypatch.setattr(parts, "KEEP_RATIO", float("inf"))  # no quick answer is kept

    async def asked(batch: pa.Table) -> pa.Table:
        if batch["id"][0].as_py() >= 500:
            raise RuntimeError("preempted")
        return batch

    class Counted:
        def __init__(self) -> None:
            self.requests = 0

        def __call__(self, batch: pa.Table) -> pa.Table:
            if batch["id"][0].as_py() >= 500:
                raise RuntimeError("preempted")
            self.requests += 1
            return batch

        def usage_counters(self) -> dict[str, int]:
            return {"requests": self.requests}

    for name, fn in (("async", asked), ("counted", Counted)):
        out = tmp_path / name
        rel = vane.range(1_000).map_batches(fn, schema={"id": "BIGINT"}, batch_size=100)
        with pytest.raises(RuntimeError, match="preempted"):
            rel.write_parquet(str(out), resume=True)
        assert sum(1 for _ in ResumeStore(str(out), "test").kept()) == 5, name


# ---- the journal, the marks and which writes keep parts ----------------------------------------


def _folder_with(tmp_path: Path, records: list[dict[str, object]], sizes: list[int]) -> Path:
    folder = tmp_path / ".out.vane-resume"
    (folder / "parts").mkdir(parents=True)
    head = _line({"sink": parts.describe(_sink(tmp_path)), "token": "t0", "input": None})
    (folder / JOURNAL).write_bytes(head + b"".join(_line(r) for r in records))
    for record, size in zip(records, sizes, strict=False):
        (folder / "parts" / str(record["name"])).write_bytes(b"x" * size)
    return folder


def _sink(tmp_path: Path) -> FileSink:
    return FileSink("parquet", str(tmp_path / "out"))


def _part(n: int, end: int) -> dict[str, object]:
    return {"name": f"p{n}", "rows": 10, "bytes": 5, "input_end": end, "output_end": end}


def test_parts_are_taken_in_order_up_to_the_first_that_is_torn_missing_or_out_of_place(tmp_path):
    folder = _folder_with(tmp_path, [_part(0, 10), _part(1, 20), _part(2, 30)], [5, 4, 5])
    kept = Parts(folder, _sink(tmp_path))
    assert [p.name for p in kept.kept] == ["p0"]  # p1's size is not its record's: p1, p2 go
    assert (kept.done.input, kept.done.output, kept.token) == (10, 10, "t0")
    assert sorted(p.name for p in (folder / "parts").iterdir()) == ["p0"]
    assert len(parts.journal_records(folder / JOURNAL)) == 2  # rewritten without them


def test_a_torn_last_record_and_a_part_from_another_sink_are_not_taken(tmp_path):
    folder = _folder_with(tmp_path, [_part(0, 10), _part(1, 20)], [5, 5])
    journal = folder / JOURNAL
    journal.write_bytes(journal.read_bytes()[:-7])  # the last line cut short
    assert [p.name for p in Parts(folder, _sink(tmp_path)).kept] == ["p0"]
    other = Parts(folder, FileSink("csv", str(tmp_path / "out")))
    assert other.kept == [] and other.done.input == 0
    assert list((folder / "parts").iterdir()) == []


def test_a_torn_tail_is_cut_off_so_that_the_parts_recorded_after_it_count(tmp_path):
    folder = _folder_with(tmp_path, [_part(0, 10)], [5])
    journal = folder / JOURNAL
    journal.write_bytes(journal.read_bytes() + b'0badc0de {"name": ')  # a torn append
    kept = Parts(folder, _sink(tmp_path))
    made = tmp_path / "p1"
    made.write_bytes(b"y" * 7)
    kept._keep(made, 10, Mark(20, 20))  # the next part, recorded after the torn line
    again = Parts(folder, _sink(tmp_path))
    assert [p.name for p in again.kept] == ["p0", "p1"] and again.done.input == 20


def test_parts_of_an_input_known_otherwise_are_not_taken(tmp_path):
    """An input whose identity changed (another DuckDB or time zone, a file rewritten with its
    size and time) gives other rows at the same places: its parts are dropped."""
    folder = _folder_with(tmp_path, [_part(0, 10)], [5])
    assert Parts(folder, _sink(tmp_path), "input-1").kept == []  # (the folder's: no identity)
    made = tmp_path / "p1"
    made.write_bytes(b"y" * 7)
    Parts(folder, _sink(tmp_path), "input-1")._keep(made, 10, Mark(10, 10))
    assert [p.name for p in Parts(folder, _sink(tmp_path), "input-1").kept] == ["p1"]
    assert Parts(folder, _sink(tmp_path), "input-2").kept == []


def test_marks_give_the_latest_place_inside_the_part_and_forget_those_before():
    marks = Marks(Mark(0, 0))
    for end in (10, 20, 30, 40):
        marks.add(Mark(end, end * 2))
    assert marks.cut(0, 25) == Mark(20, 40)
    assert marks.cut(20, 25) is None  # none after 20 up to 25
    assert marks.cut(20, 45) == Mark(40, 80)


def test_which_writes_keep_parts(tmp_path):
    from vane.execution.resume import parts_step
    from vane.plan.optimizer import optimize

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(10))}), path)

    def step(rel: vane.Relation, sink: FileSink) -> bool:
        return parts_step(optimize(rel._plan), sink) is not None

    mapped = vane.read_parquet(str(path)).map_batches(lambda b: b, schema={"id": "BIGINT"})
    folder = FileSink("parquet", str(tmp_path / "out"))
    assert step(mapped, folder)
    assert step(mapped.with_column("z", vane.col("id") + 1), folder)
    assert not step(mapped.filter("id > 3"), folder)  # rows dropped above the step
    for more in ("unnest([id, id])", "unlist([id])", "generate_subscripts([1, 2], 1)"):
        assert not step(mapped.with_column("z", vane.sql_expr(more)), folder)  # rows made
    assert not step(mapped.with_column("z", vane.sql_expr("now()")), folder)  # one a block
    drawn = vane.read_parquet(str(path)).with_column("r", vane.sql_expr("random()"))
    unlike = drawn.map_batches(lambda b: b, schema={"id": "BIGINT", "r": "DOUBLE"})
    assert not step(unlike, folder)  # an input no two runs give alike: no place to resume from
    for one in ("length(id::VARCHAR) || 'x'", "nullif(id, 3)", "CASE WHEN id > 1 THEN 2 END"):
        assert step(mapped.with_column("z", vane.sql_expr(one)), folder)
    assert not step(mapped, FileSink("parquet", str(tmp_path / "out.parquet")))  # one file
    assert not step(mapped, FileSink("json", str(tmp_path / "out")))
    assert not step(mapped, FileSink("parquet", str(tmp_path / "out"), partition_by=("id",)))
    twice = mapped.map_batches(lambda b: b, schema={"id": "BIGINT"})
    assert not step(twice, folder)  # two UDF steps
    assert not step(
        vane.read_parquet(str(path)).map_batches(
            lambda b: b, schema={"id": "BIGINT"}, preserve_order=False
        ),
        folder,
    )
    assert json.loads(parts.describe(folder))[0] == "parquet"


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev,
    reason="needs a second filesystem (/dev/shm)",
)
def test_a_destination_linked_to_another_disk_keeps_its_parts_by_copies(tmp_path):
    """The write stages beside the link's target, the saved work beside the link: parts cannot
    be hard links between them, and are copied (``parts._link``)."""
    import shutil
    import tempfile

    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        out, log = tmp_path / "out", tmp_path / "calls.log"
        out.symlink_to(elsewhere / "out", target_is_directory=True)
        _kill_when(_job(out, log, hang_at=40), lambda: _hung_with_a_part(out, log, 40))
        assert _recorded(out)
        kept = tmp_path / ".out.vane-resume" / "parts"
        assert all(p.stat().st_nlink == 1 for p in kept.iterdir())  # copies, not links
        calls, resumed = _finish(out, log)
        assert calls * BATCH + resumed == ROWS
        rows = vane.read_parquet(str(out)).to_arrow()
        assert rows["id"].to_pylist() == list(range(ROWS))
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
