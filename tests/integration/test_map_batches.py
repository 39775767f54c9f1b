"""map_batches, map and flat_map on the thread and subprocess backends, with real worker
processes: construction, ordering, validation, retries, on_error, crashes, async, GPUs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest

import vane
from tests.integration import udfs
from vane.errors import (
    ActorDiedError,
    ConfigurationError,
    SchemaMismatchError,
    UDFError,
)

BACKENDS = ["thread", "subprocess_actor"]


def inputs(n: int = 100) -> vane.Relation:
    return vane.range(n).select("id", "concat('text ', id) AS input")


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_model_batch_example(backend):
    out = inputs().map_batches(
        udfs.ModelBatch,
        schema={"id": "BIGINT", "output": "VARCHAR"},
        batch_size=8,
        execution_backend=backend,
    )
    assert out.to_pylist() == [{"id": i, "output": f"TEXT {i}"} for i in range(100)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_constructed_once_per_actor(tmp_path, backend):
    out = vane.range(2000).map_batches(
        udfs.CountingConstructor,
        schema={"id": "BIGINT", "pid": "BIGINT", "actor": "VARCHAR"},
        batch_size=50,
        concurrency=3,
        execution_backend=backend,
        fn_constructor_args=(str(tmp_path),),
    )
    table = out.to_arrow()
    assert table.num_rows == 2000
    constructed = os.listdir(tmp_path)
    assert len(constructed) == 3  # one per actor, however many batches
    assert set(table["actor"].to_pylist()) <= set(constructed)
    pids = set(table["pid"].to_pylist())
    if backend == "subprocess_actor":
        assert os.getpid() not in pids
        assert len({name.split("-")[0] for name in constructed}) == 3
    else:
        assert pids == {os.getpid()}


def test_output_keeps_input_order_across_actors():
    out = vane.range(600).map_batches(
        udfs.RandomDelay, schema={"id": "BIGINT"}, batch_size=10, concurrency=4
    )
    assert out.to_arrow()["id"].to_pylist() == list(range(600))
    unordered = vane.range(600).map_batches(
        udfs.RandomDelay,
        schema={"id": "BIGINT"},
        batch_size=10,
        concurrency=4,
        preserve_order=False,
    )
    assert sorted(unordered.to_arrow()["id"].to_pylist()) == list(range(600))


def test_functions_subprocess_task_and_sql_after_a_udf():
    for backend in ("thread", "subprocess_task"):
        out = vane.range(50).map_batches(
            udfs.add_one,
            schema={"id": "BIGINT", "next": "BIGINT"},
            batch_size=7,
            concurrency=2,
            execution_backend=backend,
        )
        assert out.filter("next % 10 = 0").select("id").to_pylist() == [
            {"id": i} for i in (9, 19, 29, 39, 49)
        ]


def test_map_and_flat_map():
    rows = vane.range(5).map(
        lambda row: {"id": row["id"], "square": row["id"] ** 2},
        schema={"id": "BIGINT", "square": "BIGINT"},
    )
    assert rows.to_pylist()[-1] == {"id": 4, "square": 16}
    expanded = vane.range(4).flat_map(
        lambda row: [{"id": row["id"], "copy": k} for k in range(row["id"])],
        schema={"id": "BIGINT", "copy": "INTEGER"},
    )
    assert expanded.count() == 0 + 1 + 2 + 3
    assert expanded.to_pylist()[:2] == [{"id": 1, "copy": 0}, {"id": 2, "copy": 0}]


def test_row_count_may_change():
    def keep_even(batch: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        return batch.filter(pc.equal(pc.bit_wise_and(batch["id"], 1), 0))

    assert vane.range(100).map_batches(keep_even, schema={"id": "BIGINT"}).count() == 50


@pytest.mark.parametrize("backend", BACKENDS)
def test_schema_mismatch_names_step_column_and_row(backend):
    out = vane.range(10).map_batches(
        udfs.wrong_type,
        schema={"id": "BIGINT", "output": "BIGINT"},
        execution_backend="subprocess_task" if backend != "thread" else "thread",
    )
    with pytest.raises(SchemaMismatchError) as info:
        out.to_arrow()
    message = str(info.value)
    assert "wrong_type" in message and "column 'output'" in message
    assert "VARCHAR" in message and "BIGINT" in message


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_error_raises_with_rows_and_cause_and_sink_commits_nothing(tmp_path, backend):
    out = vane.range(100).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=10,
        execution_backend=backend,
        fn_constructor_args=(42,),
    )
    with pytest.raises(UDFError) as info:
        out.write_parquet(tmp_path / "out")
    message = str(info.value)
    assert "FailOnRow" in message and "rows 40..49" in message
    assert "cannot score row 42" in message and "on_error='skip'" in message
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) and "cannot score row 42" in str(cause)
    if backend == "subprocess_actor":
        assert "raise ValueError" in str(cause.__cause__)  # the worker's traceback
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_error_skip_drops_only_the_failing_row(backend):
    out = vane.range(100).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=16,
        execution_backend=backend,
        fn_constructor_args=(42,),
        on_error="skip",
    )
    with pytest.warns(UserWarning, match=r"skipped 1 row.*cannot score row 42"):
        ids = out.to_arrow()["id"].to_pylist()
    assert ids == [i for i in range(100) if i != 42]


def test_on_error_null_keeps_the_row_with_the_error_text():
    out = vane.range(20).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=8,
        fn_constructor_args=(5,),
        on_error="null",
    )
    assert out.columns == ["id", "score", "error"]
    with pytest.warns(UserWarning, match="1 failing row"):
        rows = out.to_pylist()
    assert len(rows) == 20
    assert rows[5] == {"id": None, "score": None, "error": "ValueError: cannot score row 5"}
    assert rows[6] == {"id": 6, "score": 60, "error": None}


def test_retries_then_success():
    out = vane.range(30).map_batches(
        udfs.FlakyTwice, schema={"id": "BIGINT"}, batch_size=10, max_retries=2
    )
    assert out.count() == 30
    failing = vane.range(30).map_batches(
        udfs.FlakyTwice, schema={"id": "BIGINT"}, batch_size=10, max_retries=1
    )
    with pytest.raises(UDFError, match="after 2 attempts"):
        failing.to_arrow()


def test_a_dead_worker_is_replaced_and_its_batch_retried(tmp_path, caplog):
    out = vane.range(200).map_batches(
        udfs.DieOnce,
        schema={"id": "BIGINT", "pid": "BIGINT"},
        batch_size=20,
        execution_backend="subprocess_actor",
        fn_constructor_args=(str(tmp_path / "died"), 95),
    )
    table = out.to_arrow()
    assert table["id"].to_pylist() == list(range(200))
    assert len(set(table["pid"].to_pylist())) == 2  # the first worker, then its replacement
    assert "exited with code 3; starting a replacement" in caplog.text


def test_a_worker_that_always_dies_fails_with_its_exit_code():
    out = vane.range(10).map_batches(
        udfs.AlwaysDie, schema={"id": "BIGINT"}, execution_backend="subprocess_actor"
    )
    with pytest.raises(ActorDiedError, match=r"exited with code 7.*4 times"):
        out.to_arrow()


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_call_overlaps_batches_on_one_actor(backend):
    out = vane.range(400).map_batches(
        udfs.AsyncSleeper,
        schema={"id": "BIGINT", "overlap": "BIGINT"},
        batch_size=10,
        execution_backend=backend,
        max_concurrency_per_actor=8,
    )
    table = out.to_arrow()
    assert table["id"].to_pylist() == list(range(400))
    assert max(table["overlap"].to_pylist()) > 1


def test_autoscaling_adds_actors_while_the_input_waits():
    out = vane.range(3000).map_batches(
        udfs.SlowThreadTagger,
        schema={"id": "BIGINT", "actor": "VARCHAR"},
        batch_size=10,
        concurrency=(1, 3),
    )
    actors = set(out.to_arrow()["actor"].to_pylist())
    assert len(actors) == 3


def test_each_subprocess_actor_gets_its_own_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    # (each call waits until the four actors were called: one whose worker started last still
    # answers a batch, where the others could otherwise have answered all 40 first)
    out = vane.range(400).map_batches(
        udfs.ReportDevicesTogether,
        schema={"id": "BIGINT", "devices": "VARCHAR"},
        batch_size=10,
        gpus=1,
        concurrency=4,
        fn_constructor_args=(str(tmp_path), 4),
    )
    assert "backend=subprocess_actor" in out.explain() and "gpus=1" in out.explain()
    assert set(out.to_arrow()["devices"].to_pylist()) == {"0", "1", "2", "3"}


def test_too_few_gpus_fails_before_running(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigurationError, match=r"asks for 4 GPUs.*shows 2"):
        vane.range(10).map_batches(
            udfs.ReportDevices,
            schema={"id": "BIGINT", "devices": "VARCHAR"},
            gpus=2,
            concurrency=2,
        )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigurationError, match=r"shows 0 \(visible devices: none\)"):
        vane.range(10).map_batches(udfs.ReportDevices, schema={"id": "BIGINT"}, gpus=1)


def test_worker_output_is_forwarded_with_the_actor_as_prefix(capfd):
    vane.range(5).map_batches(
        udfs.Chatty, schema={"id": "BIGINT"}, execution_backend="subprocess_actor"
    ).to_arrow()
    out = capfd.readouterr().out
    assert "(Chatty actor 0 pid=" in out and ") loading the chatty model" in out


def test_a_class_defined_in_main_runs_in_subprocess_actors(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import pyarrow as pa, pyarrow.compute as pc, vane\n"
        "class Local:\n"
        "    def __init__(self):\n"
        "        self.offset = 100\n"
        "    def __call__(self, batch):\n"
        "        v = pc.add(batch['id'], self.offset)\n"
        "        return pa.table({'id': batch['id'], 'v': v})\n"
        "if __name__ == '__main__':\n"
        "    out = vane.range(5).map_batches(Local, schema={'id': 'BIGINT', 'v': 'BIGINT'},\n"
        "                                    execution_backend='subprocess_actor')\n"
        "    print(out.to_arrow()['v'].to_pylist())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.strip().splitlines()[-1] == "[100, 101, 102, 103, 104]"


def test_events_report_true_totals():
    from vane.observe.events import BatchDone, StageFinished, StageStarted, subscribe

    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    out = vane.range(1000).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=64,
        fn_constructor_args=(500,),
        on_error="skip",
    )
    try:
        with pytest.warns(UserWarning, match="skipped 1 row"):
            assert out.to_arrow().num_rows == 999
    finally:
        unsubscribe()
    started = [e for e in seen if isinstance(e, StageStarted)]
    batches = [e for e in seen if isinstance(e, BatchDone)]
    (finished,) = [e for e in seen if isinstance(e, StageFinished)]
    assert len(started) == 1 and started[0].actors == 1
    assert sum(b.rows_in for b in batches) == 1000 == finished.rows_in
    assert sum(b.rows_out for b in batches) == 999 == finished.rows_out
    assert finished.rows_skipped == 1


def test_cpus_size_each_worker_and_impossible_requests_fail_early():
    out = vane.range(10).map_batches(
        udfs.ReportThreads,
        schema={"id": "BIGINT", "threads": "VARCHAR"},
        execution_backend="subprocess_actor",
        cpus=1,
    )
    assert set(out.to_arrow()["threads"].to_pylist()) == {"1"}
    with pytest.raises(ConfigurationError, match=r"asks for 2000 CPUs"):
        vane.range(10).map_batches(udfs.noop, schema={"id": "BIGINT"}, cpus=1000, concurrency=2)
    with pytest.raises(ConfigurationError, match="GiB of memory"):
        vane.range(10).map_batches(udfs.noop, schema={"id": "BIGINT"}, memory=2**50)


def test_exit_descriptions_name_the_signal():
    from vane.execution.actors.subprocess import exit_description

    assert exit_description(-9) == "was killed by signal SIGKILL"
    assert exit_description(3) == "exited with code 3"


def test_a_worker_killed_by_a_signal_is_replaced(tmp_path, caplog):
    out = vane.range(100).map_batches(
        udfs.KillOnce,
        schema={"id": "BIGINT"},
        batch_size=10,
        execution_backend="subprocess_actor",
        fn_constructor_args=(str(tmp_path / "killed"),),
    )
    assert out.to_arrow()["id"].to_pylist() == list(range(100))
    assert "killed by signal SIGKILL" in caplog.text


def _stderr_on_a_terminal(script: str) -> str:
    import pty

    primary, secondary = pty.openpty()
    subprocess.run(
        [sys.executable, "-c", script], stderr=secondary, stdout=subprocess.DEVNULL, check=True
    )
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    return shown.decode()


@pytest.mark.parametrize("enabled", [True, False])
def test_progress_appears_on_a_terminal_unless_turned_off(enabled):
    script = (
        "import vane, time\n"
        f"vane.configure(progress={enabled})\n"
        "def slow(b):\n"
        "    time.sleep(0.15)\n"
        "    return b\n"
        "vane.range(2000).map_batches(slow, schema={'id': 'BIGINT'}, batch_size=200).to_arrow()\n"
    )
    text = _stderr_on_a_terminal(script)
    if enabled:
        text = " ".join(text.split())  # as wrapped to the terminal's width
        assert "slow: " in text and "rows in" in text and "actors busy" in text
        # the range's size is known: a percentage, and the time left while it runs
        assert "100% 2,000 rows in, 2,000 out" in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
        assert "of 2,000 rows in" in text and "ETA " in text and "done in" in text
    else:
        assert text == ""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_constructor_is_a_udf_error_with_its_cause(backend):
    out = vane.range(10).map_batches(
        udfs.BrokenInit, schema={"id": "BIGINT"}, execution_backend=backend, concurrency=2
    )
    with pytest.raises(
        UDFError, match=r"constructing BrokenInit failed: FileNotFoundError"
    ) as info:
        out.to_arrow()
    assert isinstance(info.value.__cause__, FileNotFoundError)
