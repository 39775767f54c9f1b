"""Faults of the actors rather than of the function: rows that kill or hang their worker
(isolated under on_error skip/null), GPU shares after replacements, replies the driver cannot
decode, and failures of the pool's own threads."""

from __future__ import annotations

import contextlib
import os
import signal

import pyarrow as pa
import pytest

import vane
from tests.integration import udfs
from vane.errors import ActorDiedError, ExecutionError, UDFError
from vane.execution.actors import ipc, shm

# ---- poison rows: a row that kills or hangs its actor ------------------------------------------


@pytest.mark.timeout(180)
def test_rows_that_kill_their_worker_are_skipped_and_reported():
    out = vane.range(40).map_batches(
        udfs.ExitOnRows,
        schema={"id": "BIGINT"},
        batch_size=8,
        execution_backend="subprocess_actor",
        fn_constructor_args=((13, 30),),
        on_error="skip",
    )
    with pytest.warns(UserWarning, match="skipped 2 row") as caught:
        ids = out.to_arrow()["id"].to_pylist()
    assert ids == [i for i in range(40) if i not in (13, 30)]
    (warning,) = [str(w.message) for w in caught]
    assert "skipped 2 rows" in warning and "2 of them killed or hung their actor" in warning
    assert "input row 13: the worker process" in warning and "exited with code 137" in warning
    assert "input row 30:" in warning


@pytest.mark.timeout(180)
def test_a_row_that_kills_its_worker_becomes_nulls_with_the_reason():
    out = vane.range(16).map_batches(
        udfs.ExitOnRows,
        schema={"id": "BIGINT"},
        batch_size=8,
        execution_backend="subprocess_actor",
        fn_constructor_args=((5,),),
        on_error="null",
    )
    with pytest.warns(UserWarning, match="kept 1 failing row"):
        rows = out.to_pylist()
    # the row is kept in its place, its columns null: the function answered nothing for it
    assert [r["id"] for r in rows] == [*range(5), None, *range(6, 16)]
    assert rows[5]["error"].startswith("ActorDiedError: the worker process")
    assert "exited with code 137" in rows[5]["error"]


@pytest.mark.timeout(180)
def test_under_raise_a_row_that_kills_its_worker_still_fails_the_step():
    out = vane.range(16).map_batches(
        udfs.ExitOnRows,
        schema={"id": "BIGINT"},
        batch_size=8,
        execution_backend="subprocess_actor",
        fn_constructor_args=((5,),),
    )
    with pytest.raises(
        ActorDiedError, match=r"exited with code 137 while running input rows 0\.\.7"
    ):
        out.to_arrow()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_row_that_hangs_is_skipped_after_its_timeout(backend, release_hung):
    out = vane.range(12).map_batches(
        udfs.HangOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend=backend,
        fn_constructor_args=(5,),
        batch_timeout_s=0.5,
        on_error="skip",
    )
    with pytest.warns(UserWarning, match=r"input row 5: the call did not finish within"):
        ids = out.to_arrow()["id"].to_pylist()
    assert ids == [i for i in range(12) if i != 5]


@pytest.mark.parametrize("on_error", ["skip", "null"])
def test_a_row_whose_output_breaks_the_schema_is_a_failing_row(on_error):
    def label(row: dict) -> dict:
        return {"id": row["id"], "label": "odd" if row["id"] == 3 else row["id"] * 2}

    out = vane.range(6).map(
        label, schema={"id": "BIGINT", "label": "BIGINT"}, batch_size=6, on_error=on_error
    )
    with pytest.warns(UserWarning, match=r"first error: ContractError: .*column 'label'"):
        rows = out.to_pylist()
    if on_error == "skip":
        assert [r["id"] for r in rows] == [0, 1, 2, 4, 5]
    else:
        assert (
            rows[3]["id"] is None
            and rows[3]["label"] is None
            and "column 'label'" in rows[3]["error"]
        )
        assert rows[4] == {"id": 4, "label": 8, "error": None}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["shell", "fork"])
def test_a_worker_that_dies_is_replaced_though_a_process_it_started_lives_on(tmp_path, how):
    # The driver learns of a death from the end of the worker's result pipe: a helper the UDF
    # left running (sleeping 600 s) must not hold that pipe open, or every death waits for it.
    out = vane.range(12).map_batches(
        udfs.LeavesAHelperThenDies,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend="subprocess_actor",
        fn_constructor_args=(5, how, str(tmp_path)),
        on_error="skip",
    )
    try:
        with pytest.warns(UserWarning, match="skipped 1 row"):
            ids = out.to_arrow()["id"].to_pylist()
        assert ids == [i for i in range(12) if i != 5]
    finally:
        helpers = [int(p.read_text()) for p in tmp_path.glob("helper-of-*") if p.read_text()]
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert helpers  # the helpers were started, so the test tried what it says


# ---- GPU shares --------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_gpu_shares_come_back_when_an_actor_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    out = vane.range(600).map_batches(
        udfs.DiesFirstThenSlowDevices,
        schema={"id": "BIGINT", "devices": "VARCHAR"},
        batch_size=10,
        gpus=1,
        concurrency=(1, 2),
        fn_constructor_args=(str(tmp_path / "died"),),
    )
    table = out.to_arrow()
    assert table["id"].to_pylist() == list(range(600))
    # The first actor died and was replaced on device 0; the scale-up after it gets device 1.
    devices = table["devices"].to_pylist()
    assert set(devices) == {"0", "1"}, sorted(set(devices))


# ---- replies the driver cannot decode, and the pool's own threads -----------------------------


@pytest.mark.timeout(120)
def test_an_exception_only_the_worker_can_import_keeps_its_name_and_text(tmp_path):
    out = vane.range(10).map_batches(
        udfs.RaisesWorkerOnlyError,
        schema={"id": "BIGINT"},
        execution_backend="subprocess_actor",
        fn_constructor_args=(str(tmp_path),),
    )
    with pytest.raises(UDFError, match="WorkerOnlyError: rows from 0 are unreadable") as info:
        out.to_arrow()
    cause = info.value.__cause__
    assert type(cause).__name__ == "WorkerOnlyError" and str(cause) == "rows from 0 are unreadable"
    assert isinstance(cause, ValueError)  # its builtin base survives the trip
    assert isinstance(info.value, ValueError)
    assert "raise self.error" in str(cause.__cause__)  # the worker's traceback


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broken", ["write_table", "read_table"])
def test_a_failure_of_the_pools_own_threads_fails_the_job_clearly(monkeypatch, broken):
    def fails(*args: object, **kwargs: object) -> object:
        raise ArithmeticError("injected fault")

    monkeypatch.setattr(ipc, broken, fails)  # used only by the driver's sender/receiver
    out = vane.range(30).map_batches(
        udfs.noop, schema={"id": "BIGINT"}, batch_size=10, execution_backend="subprocess_actor"
    )
    thread = "sending batches to" if broken == "write_table" else "receiving results from"
    with pytest.raises(ExecutionError, match=f"the thread {thread} noop actor 0 failed") as info:
        out.to_arrow()
    assert "ArithmeticError: injected fault" in str(info.value)
    assert "exited with code" not in str(info.value)
    assert isinstance(info.value.__cause__, ArithmeticError)


def test_a_table_survives_the_trip_through_the_codecs():
    from vane.udf.runtime import BatchOutcome, Task

    table = pa.table({"id": [1, 2, 3]})
    slots = shm.Slots.create(2, limit=shm.SLOT_LIMIT)
    try:
        for slot in (None, 1):  # inline, then in a slot
            parts = ipc.batch_parts(7, Task(0, 40, table, 1), slots, slot)
            frame = b"".join(bytes(p) for p in parts)
            token, came_in, task = ipc.read_batch(memoryview(frame), slots)
            assert (token, task.offset, task.attempts_done, task.table) == (7, 40, 1, table)
            assert came_in == (ipc.INLINE if slot is None else slot)
            outcome = BatchOutcome(table, 1, 0, "ValueError: x", [2], ["input row 42: died"])
            frame = b"".join(bytes(p) for p in ipc.outcome_parts(3, outcome, slots, slot))
            token, size, _, rest = ipc.unpack_ids(memoryview(frame))
            assert token == 3 and ipc.read_outcome(rest, size, slots) == outcome
    finally:
        slots.close()


def test_a_vane_folder_in_the_working_directory_does_not_shadow_the_workers_vane(
    tmp_path, monkeypatch
):
    fake = tmp_path / "vane"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the wrong vane')\n")
    monkeypatch.chdir(tmp_path)
    out = vane.range(6).map_batches(
        udfs.noop, schema={"id": "BIGINT"}, execution_backend="subprocess_actor"
    )
    assert out.count() == 6
