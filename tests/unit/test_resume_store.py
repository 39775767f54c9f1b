"""A resumable write's saved answers (``vane/io/resume.py``): an answer is taken back exactly
as it was put, and one that came back damaged (torn by a kill or a crash of the machine, cut
short, overwritten) is never taken: it reads as missing, so its batch is computed again. The
answers live in append-only logs, one per writer: a log cut anywhere keeps exactly the records
written whole before the cut, and a damaged record hides at most itself and those after it."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import pickle
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vane.errors import ResumeError
from vane.execution.resume import Checkpoint
from vane.io.resume import PIPELINE, ResumeStore
from vane.udf.runtime import BatchOutcome, RowError

META = {"rows_skipped": 1, "errors": [[3, "ValueError: no", 2]]}
FINGERPRINT = {"plan": "p", "steps": {}, "inputs": {}}


def _store(root: Path) -> ResumeStore:
    store = ResumeStore(str(root / "out"), "write_parquet")
    store.open(FINGERPRINT, restart=False)
    return store


def _rerun(store: ResumeStore) -> ResumeStore:
    """The store as a rerun opens it: a new process's view, built from the logs alone, once
    the run before has ended (closed: its lock let go, as its process's end would)."""
    store.close()
    again = ResumeStore(str(store.path.parent / "out"), "write_parquet")
    assert again.open(FINGERPRINT, restart=False)
    return again


def _log(store: ResumeStore, step: str = "step") -> Path:
    (log,) = (store.path / step).glob("*.log")
    return log


def _answers(count: int) -> list[pa.Table]:
    return [
        pa.table({"id": list(range(i, i + 1 + i % 5)), "s": ["x" * i] * (1 + i % 5)})
        for i in range(count)
    ]


def _write(store: ResumeStore, tables: list[pa.Table]) -> list[int]:
    """Put each table as answer ``d<i>``; the log's size after each (where each record ends)."""
    ends = []
    for i, table in enumerate(tables):
        store.put("step", f"d{i}", table, {"i": i})
        ends.append(_log(store).stat().st_size)
    return ends


@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=50))
def test_an_answer_comes_back_as_it_was_put(tmp_path_factory, values):
    store = _store(tmp_path_factory.mktemp("store"))
    table = pa.table({"id": pa.array(values, pa.int64()), "s": [str(v) for v in values]})
    store.put("step", "d1", table, META)
    for reader in (store, _rerun(store)):  # the writer's own index, and a rerun's
        saved = reader.get("step", "d1")
        assert saved is not None
        assert saved.table.equals(table) and saved.table.schema.metadata is None
        assert saved.meta == META
    store.close()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(count=st.integers(1, 6), cut=st.floats(0, 1))
def test_a_log_cut_anywhere_keeps_exactly_the_records_written_whole_before_the_cut(
    tmp_path_factory, count, cut
):
    store = _store(tmp_path_factory.mktemp("store"))
    tables = _answers(count)
    ends = _write(store, tables)
    store.close()
    log = _log(store)
    data = log.read_bytes()
    at = round(cut * len(data))
    log.write_bytes(data[:at])  # a kill -9 mid-write leaves a prefix of what it appended
    rerun = _rerun(store)
    whole = [i for i, end in enumerate(ends) if end <= at]
    assert sorted(digest for _, digest in rerun.kept()) == sorted(f"d{i}" for i in whole)
    for i, table in enumerate(tables):
        saved = rerun.get("step", f"d{i}")
        if i in whole:
            assert saved is not None and saved.table.equals(table) and saved.meta == {"i": i}
        else:
            assert saved is None


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    count=st.integers(1, 6),
    victim=st.integers(0, 5),
    where=st.floats(0, 1, exclude_max=True),
    burst=st.binary(min_size=1, max_size=4).filter(any),
)
def test_damaged_bytes_in_a_record_hide_that_record_and_none_before_it(
    tmp_path_factory, count, victim, where, burst
):
    """Bytes flipped in one record (head, digest, body or CRC): that record reads as missing,
    every record before it reads back whole, and one after it reads back whole or not at all,
    never wrong. (A burst of up to 32 bits: one a CRC-32 always catches.)"""
    store = _store(tmp_path_factory.mktemp("store"))
    tables = _answers(count)
    ends = _write(store, tables)
    store.close()
    victim %= count
    start = ends[victim - 1] if victim else 0
    at = start + int(where * (ends[victim] - start))
    at = min(at, ends[victim] - len(burst))
    log = _log(store)
    data = bytearray(log.read_bytes())
    for offset, flip in enumerate(burst):
        data[at + offset] ^= flip
    log.write_bytes(bytes(data))
    rerun = _rerun(store)
    for i, table in enumerate(tables):
        saved = rerun.get("step", f"d{i}")
        if i < victim:
            assert saved is not None and saved.table.equals(table)
        elif i == victim:
            assert saved is None
        else:
            assert saved is None or (saved.table.equals(table) and saved.meta == {"i": i})


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: data[:100] + bytes(len(data) - 100),  # zeroed after its first bytes
        # Its values zeroed, its head and tail whole: only the CRC tells.
        lambda data: data[:400] + bytes(4_000) + data[4_400:],
        lambda data: data[:-4],  # the tail gone
        lambda data: b"",
    ],
)
def test_a_damaged_answer_reads_as_missing_and_is_kept_again(tmp_path, damage):
    store = _store(tmp_path)
    store.put("step", "d1", pa.table({"id": list(range(1_000))}), META)
    store.close()
    log = _log(store)
    log.write_bytes(damage(log.read_bytes()))
    rerun = _rerun(store)
    assert rerun.get("step", "d1") is None
    rerun.put("step", "d1", pa.table({"id": [7]}), {})  # computed again, and kept again
    again = _rerun(rerun)
    for reader in (rerun, again):
        saved = reader.get("step", "d1")
        assert saved is not None and saved.table["id"].to_pylist() == [7]
    again.finish()
    assert not store.path.exists()


def test_threads_keep_answers_in_logs_of_their_own(tmp_path):
    store = _store(tmp_path)
    tables = _answers(40)
    together = threading.Barrier(4)  # all alive at once (a thread's id is reused after it)

    def keep(first: int) -> None:
        together.wait()
        for i in range(first, len(tables), 4):
            store.put("step", f"d{i}", tables[i], {"i": i})
        together.wait()

    threads = [threading.Thread(target=keep, args=(first,)) for first in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    assert len(list((store.path / "step").glob("*.log"))) == 4
    rerun = _rerun(store)
    for i, table in enumerate(tables):
        saved = rerun.get("step", f"d{i}")
        assert saved is not None and saved.table.equals(table) and saved.meta == {"i": i}


def _keep_in_a_process(store: ResumeStore, first: int, count: int) -> None:
    for i in range(first, first + count):
        store.put("step", f"d{i}", pa.table({"id": [i]}), {"i": i})
    store.close()


def test_processes_given_a_copy_of_the_store_keep_answers_a_rerun_finds(tmp_path):
    """As Ray actors do: each is sent the store (pickled) and keeps answers into its own logs,
    while the driver's copy keeps its own."""
    store = _store(tmp_path)
    store.put("step", "driver", pa.table({"id": [-1]}), {})
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_keep_in_a_process, args=(store, 10 * w, 10)) for w in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    store.close()
    rerun = _rerun(store)
    assert len(list(rerun.kept())) == 21
    for i in range(20):
        saved = rerun.get("step", f"d{i}")
        assert saved is not None and saved.table["id"].to_pylist() == [i]


def test_a_store_without_logs_answers_nothing(tmp_path):
    store = _store(tmp_path)
    assert store.get("step", "d1") is None and list(store.kept()) == []
    store.make()  # (a folder with its pipeline.json, and no answer kept)
    assert store.get("step", "d1") is None and list(store.kept()) == []
    shutil.rmtree(store.path)
    assert list(ResumeStore(str(tmp_path / "out"), "write_parquet").kept()) == []


@pytest.mark.parametrize("where", ["here", "in a copy"])
def test_the_pipeline_is_recorded_with_the_first_answer_kept_and_not_before(tmp_path, where):
    """A job that keeps nothing writes nothing; the first answer kept, here or by a copy of
    the store (a Ray actor's), writes the job's pipeline.json first, so that a rerun of another
    pipeline is refused."""
    store = _store(tmp_path)
    assert list(store.path.iterdir()) == []  # (made empty, to hold the job's lock)
    keeper = store if where == "here" else pickle.loads(pickle.dumps(store))
    keeper.put("step", "d0", pa.table({"x": [1]}), {})
    assert (store.path / PIPELINE).exists()
    rerun = _rerun(store)
    assert rerun.get("step", "d0") is not None
    rerun.close()
    with pytest.raises(ResumeError, match="not the one whose work is saved"):
        ResumeStore(str(tmp_path / "out"), "write_parquet").open(
            {**FINGERPRINT, "plan": "another"}, restart=False
        )
    keeper.close()
    store.finish()
    assert not store.path.exists()


def test_a_job_that_kept_nothing_leaves_nothing_to_refuse_a_changed_one(tmp_path):
    store = _store(tmp_path)
    store.close()  # (a job that failed, or was killed, before keeping an answer)
    again = ResumeStore(str(tmp_path / "out"), "write_parquet")
    assert not again.open({**FINGERPRINT, "plan": "another"}, restart=False)


# ---- a unit of several calls, kept call by call ---------------------------------------------


@st.composite
def _calls(draw: st.DrawFn) -> tuple[int, list[list[BatchOutcome]]]:
    """A unit: its calls' input size, and each call's answer as the pieces it was joined from
    (a call bisected because rows failed is answered in halves), with rows dropped, nulled and
    failing as on_error leaves them."""
    call_rows = draw(st.integers(1, 6))
    calls = []
    for _ in range(draw(st.integers(1, 5))):
        pieces = []
        sizes = draw(st.sampled_from([[call_rows], [call_rows // 2, call_rows - call_rows // 2]]))
        for rows in (n for n in sizes if n):
            out = draw(st.integers(0, 3))  # map_batches may answer any number of rows
            failing = draw(st.lists(st.integers(0, rows - 1), unique=True, max_size=rows))
            errors = [RowError(r, f"ValueError: row {r}", 2) for r in sorted(failing)]
            pieces.append(
                BatchOutcome(
                    pa.table({"x": pa.array(range(out), pa.int64())}),
                    rows_skipped=len(failing) // 2,
                    rows_nulled=len(failing) - len(failing) // 2,
                    first_error=errors[0].error if errors else None,
                    dropped=sorted(failing)[: len(failing) // 2],
                    errors=errors,
                )
            )
        calls.append(pieces)
    return call_rows, calls


def _joined(parts: list[tuple[int, BatchOutcome]]) -> BatchOutcome:
    """``parts`` (input offset, outcome) joined in order, as an actor joins them."""
    joined = parts[0][1]
    for offset, outcome in parts[1:]:
        joined = joined.then(outcome, offset)
    return joined


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(unit=_calls())
def test_a_units_answer_cut_at_its_calls_is_each_calls_own_answer(unit):
    call_rows, calls = unit
    starts = [i * call_rows for i in range(len(calls))]
    own = []  # each call's answer, as if it had been sent alone
    parts = []  # every piece of the unit, at its offset in the unit
    for start, pieces in zip(starts, calls, strict=True):
        offsets = [0, call_rows // 2] if len(pieces) == 2 else [0]
        own.append(_joined(list(zip(offsets, pieces, strict=True))))
        parts += [(start + offset, piece) for offset, piece in zip(offsets, pieces, strict=True)]
    cut = _joined(parts).calls_of(starts, call_rows * len(calls))
    assert cut is not None
    for got, want in zip(cut, own, strict=True):
        assert got.table.equals(want.table)
        assert (got.rows_skipped, got.rows_nulled) == (want.rows_skipped, want.rows_nulled)
        assert (got.dropped, got.errors) == (want.dropped, want.errors)
        assert got.first_error == want.first_error
    begun = {offset for offset, _ in parts}
    inside = [row for row in range(call_rows * len(calls)) if row not in begun]
    if inside:  # a cut where no piece begins is refused, never a wrong answer
        assert _joined(parts).calls_of([0, inside[0]], call_rows * len(calls)) is None


def test_a_unit_that_failed_part_way_keeps_the_calls_before_the_failure(tmp_path):
    store = _store(tmp_path)
    checkpoint = Checkpoint(store, "step")
    first = BatchOutcome(pa.table({"x": [1, 2]}))
    unit = first.then(BatchOutcome(pa.table({"x": [3]})), 2)
    unit.failure = RuntimeError("the third call failed")
    checkpoint.put(["a", "b", "c"], [0, 2, 4], unit, 6)
    again = Checkpoint(_rerun(store), "step")
    kept_a, kept_b = again.get("a"), again.get("b")
    assert kept_a is not None and kept_a.table["x"].to_pylist() == [1, 2]
    assert kept_b is not None and kept_b.table["x"].to_pylist() == [3]
    assert again.get("c") is None


@pytest.mark.parametrize("second", ["the same pipeline", "another pipeline"])
def test_a_second_run_on_the_destination_is_refused_while_the_first_runs(tmp_path, second):
    """Two resumable writes to one destination would write each other's answers and parts
    (and the second's pipeline.json over the first's): the folder's lock refuses the second
    while the first runs, whatever it has kept, and lets it start once the first has ended."""
    first = _store(tmp_path)
    fingerprint = FINGERPRINT if second == "the same pipeline" else {**FINGERPRINT, "plan": "b"}
    other = ResumeStore(str(tmp_path / "out"), "write_parquet")
    with pytest.raises(ResumeError, match="another resumable write to the same destination"):
        other.open(fingerprint, restart=False)
    with pytest.raises(ResumeError, match="another resumable write"):
        other.open(fingerprint, restart=True)  # (nor may it drop the running job's work)
    first.put("step", "d0", pa.table({"x": [1]}), {})
    first.close()  # the first run ended (failed: its work kept)
    if second == "the same pipeline":
        assert other.open(fingerprint, restart=False)  # it resumes the first one's work
        assert other.get("step", "d0") is not None
    else:
        with pytest.raises(ResumeError, match="not the one whose work is saved"):
            other.open(fingerprint, restart=False)
        assert not other.open(fingerprint, restart=True)
    other.finish()
    assert not other.path.exists()


def test_a_run_that_took_the_folder_after_one_closed_keeps_it_when_that_one_finishes(tmp_path):
    first = _store(tmp_path)
    first.put("step", "d0", pa.table({"x": [1]}), {})
    first.close()  # committed, not yet finished (its folder still there)
    later = ResumeStore(str(tmp_path / "out"), "write_parquet")
    assert later.open(FINGERPRINT, restart=False)
    first.finish()  # the saved work is the later run's now: not removed under it
    assert later.get("step", "d0") is not None
    later.finish()
    assert not later.path.exists()


def test_a_file_system_without_locks_runs_unlocked_as_before_and_says_so(
    tmp_path, monkeypatch, caplog
):
    def no_locks(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    store = _store(tmp_path)
    assert "takes no locks" in caplog.text
    store.put("step", "d0", pa.table({"x": [1]}), {})
    store.close()
    assert _rerun(store).get("step", "d0") is not None
    store.finish()
    assert not store.path.exists()
