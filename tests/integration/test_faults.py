"""Fault paths found in review: each of these once hung, leaked, lost a batch or raised the
wrong error."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pytest

import vane
from tests.integration import udfs
from tests.integration.support import udf_spec
from vane.errors import ExecutionError, SchemaMismatchError, SinkError, UDFError
from vane.execution.actors.thread import ThreadPool


def _actor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("vane-actor-")]


@pytest.mark.timeout(60)
def test_an_actor_that_finishes_starting_after_teardown_is_stopped(release_hung):
    before = set(_actor_threads())
    pool = ThreadPool(udf_spec(udfs.SlowInit), pa.schema([("id", pa.int64())]), "SlowInit")
    failed: list[BaseException] = []

    def start() -> None:
        try:
            pool.start()
        except BaseException as exc:
            failed.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    while not set(_actor_threads()) - before:  # the constructor is running
        time.sleep(0.01)
    pool.teardown()
    release_hung.set()  # the model finishes loading after the pool closed
    starting.join()
    for thread in set(_actor_threads()) - before:
        thread.join(timeout=30)
    assert failed and pool.actors == []
    assert not set(_actor_threads()) - before


@pytest.mark.timeout(60)
def test_thread_actors_stop_gracefully_or_at_once(tmp_path, release_hung):
    from vane.udf.runtime import Task

    schema = pa.schema([("id", pa.int64())])

    def tasks() -> list[Task]:
        return [Task(n, 10 * n, pa.table({"id": range(10 * n, 10 * n + 10)})) for n in range(4)]

    pool = ThreadPool(udf_spec(udfs.RandomDelay), schema, "RandomDelay")
    pool.start()
    futures = [pool.submit(task) for task in tasks()]
    pool.teardown(graceful=True)  # every batch submitted finishes first
    assert [f.result(timeout=0).table["id"][0].as_py() for f in futures] == [0, 10, 20, 30]

    spec = udf_spec(udfs.HangAlways, constructor_args=(str(tmp_path),))
    hung = ThreadPool(spec, schema, "HangAlways")
    hung.start()
    queued = [hung.submit(task) for task in tasks()]
    while not os.listdir(tmp_path):  # the first batch is running, and hangs
        time.sleep(0.01)
    hung.teardown(graceful=False)  # returns although a call hangs, and drops the queued batches
    release_hung.set()
    assert not any(f.done() and not f.cancelled() for f in queued[1:])


@pytest.mark.timeout(60)
def test_system_exit_in_a_thread_udf_fails_the_step_instead_of_hanging():
    out = vane.range(20).map_batches(udfs.ExitOnRow, schema={"id": "BIGINT"}, batch_size=4)
    with pytest.raises(UDFError, match=r"rows 4\.\.7.*SystemExit: bad config"):
        out.to_arrow()


@pytest.mark.timeout(120)
def test_system_exit_in_a_worker_fails_the_step():
    out = vane.range(20).map_batches(
        udfs.ExitOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend="subprocess_actor",
    )
    with pytest.raises(UDFError, match="SystemExit: bad config"):
        out.to_arrow()


def test_an_error_after_a_udf_is_reported_not_a_generator_exit(tmp_path):
    rel = vane.range(100).map_batches(udfs.noop, schema={"id": "BIGINT"}, batch_size=10)
    bad = rel.with_column("v", "CASE WHEN id = 55 THEN error('row 55 is bad') ELSE id END")
    with pytest.raises(ExecutionError, match="row 55 is bad"):
        bad.write_parquet(tmp_path / "out")
    with pytest.raises(ExecutionError, match="row 55 is bad"):
        list(bad.iter_batches(10))
    assert os.listdir(tmp_path) == []


def test_an_error_in_a_udfs_input_is_an_execution_error():
    bad_input = vane.range(100).with_column(
        "v", "CASE WHEN id = 70 THEN error('bad input row') ELSE id END"
    )
    out = bad_input.map_batches(udfs.noop, schema={"id": "BIGINT", "v": "BIGINT"})
    with pytest.raises(ExecutionError, match="bad input row") as info:
        out.to_arrow()
    assert "noop" in str(info.value)


def test_map_rows_must_have_exactly_the_declared_keys():
    out = vane.range(3).map(
        lambda row: {"id": row["id"]} if row["id"] == 2 else {"id": row["id"], "label": "x"},
        schema={"id": "BIGINT", "label": "VARCHAR"},
    )
    with pytest.raises(SchemaMismatchError, match=r"output row 2 .*missing \['label'\]"):
        out.to_arrow()


def test_autoscaling_does_not_add_actors_a_slow_input_cannot_feed():
    # The input makes each batch only once the step has answered the one before: its one actor
    # is never busy with a batch waiting, however long the run takes.
    udfs.LOCKSTEP = threading.Semaphore(1)
    slow = vane.range(1500).map_batches(
        udfs.LockstepSource, schema={"id": "BIGINT"}, batch_size=100
    )
    out = slow.map_batches(
        udfs.LockstepTagger,
        schema={"id": "BIGINT", "actor": "VARCHAR"},
        batch_size=100,
        concurrency=(1, 4),
    )
    table = out.to_arrow()
    assert table["id"].to_pylist() == list(range(1500))
    assert len(set(table["actor"].to_pylist())) == 1


def test_a_file_that_appears_during_a_write_is_not_replaced(tmp_path):
    target = tmp_path / "out.parquet"
    rel = vane.range(10).map_batches(
        udfs.CreateFileMidway, schema={"id": "BIGINT"}, fn_constructor_args=(str(target),)
    )
    with pytest.raises(SinkError, match="appeared while writing"):
        rel.write_parquet(target)
    assert target.read_text() == "someone else's file"
    assert [n for n in os.listdir(tmp_path) if not n.endswith(".vane-lock")] == ["out.parquet"]


def test_a_failed_append_takes_back_the_files_it_moved(tmp_path, monkeypatch):
    out = tmp_path / "out"
    vane.range(5).write_parquet(out)
    before = sorted(os.listdir(out))
    real_rename = os.rename
    calls = {"n": 0}

    def rename_fails_on_the_second_file(src, dst):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real_rename(src, dst)

    monkeypatch.setattr("vane.io.commit.os.rename", rename_fails_on_the_second_file)
    with pytest.raises(SinkError, match="disk full"):
        vane.range(30).write_parquet(out, mode="append", rows_per_file=10)
    monkeypatch.undo()
    assert sorted(os.listdir(out)) == before
    assert sorted(n for n in os.listdir(tmp_path) if not n.endswith(".vane-lock")) == ["out"]


@pytest.mark.timeout(120)
def test_an_early_teardown_leaves_no_batch_unsettled():
    # A Ray host's calls wait on their batches' futures: after an early end, which drops the
    # batches not started, each must be settled, or a kept host keeps a call thread per
    # dropped batch waiting for good (vane/execution/ray/actor.py, ``close``)
    from vane.execution.actors.subprocess import SubprocessPool
    from vane.udf.runtime import Task

    schema = pa.schema([("id", pa.int64())])
    spec = udf_spec(udfs.RandomDelay, backend="subprocess_actor")
    pool = SubprocessPool(spec, schema, "RandomDelay", [], linger=True)
    pool.start()
    futures = [
        pool.submit(Task(n, 10 * n, pa.table({"id": range(10 * n, 10 * n + 10)}))) for n in range(8)
    ]
    pool.teardown(graceful=True, early=True)
    pool.drop_unanswered(RuntimeError("dropped"))
    for future in futures:
        future.exception(timeout=60)  # settled: answered, or dropped
