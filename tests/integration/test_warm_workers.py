"""Subprocess actors' worker processes kept warm between actions (vane/execution/actors/warm.py):
the next action with workers started the same way reuses the processes, never the UDF instance;
a different start, an edited module, a changed environment or a crash means a new process; idle
workers end after ``worker_idle_timeout_s`` and with the interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from tests.integration.support import gone
from vane.config import get_config
from vane.execution.actors.warm import WARM

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"pid": "BIGINT", "calls": "BIGINT", "born": "VARCHAR", "warm": "BOOLEAN"}


class WhoRuns:
    """Each row: the worker's pid, this instance's calls so far, an id made by its constructor,
    and whether what a first batch needs was imported before the constructor ran."""

    def __init__(self) -> None:
        self.calls = 0
        self.born = uuid.uuid4().hex
        self.warm = "pandas" in sys.modules and "pyarrow.compute" in sys.modules

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.calls += 1
        n = batch.num_rows
        return pa.table(
            {
                "pid": pa.array([os.getpid()] * n, pa.int64()),
                "calls": pa.array([self.calls] * n, pa.int64()),
                "born": [self.born] * n,
                "warm": [self.warm] * n,
            }
        )


def run(udf: type = WhoRuns, **options: object) -> pa.Table:
    options.setdefault("execution_backend", "subprocess_actor")
    return (
        vane.range(4)
        .map_batches(udf, schema=SCHEMA, batch_size=2, **options)  # type: ignore[arg-type]
        .to_arrow()
    )


def pids(table: pa.Table) -> set[int]:
    return set(table["pid"].to_pylist())


@pytest.fixture(autouse=True)
def _idle_for_a_minute():
    """Long enough that no worker ends by its timeout during a test, unless the test says so;
    the previous setting (and no idle worker of these tests) afterwards."""
    before = get_config().worker_idle_timeout_s
    vane.configure(worker_idle_timeout_s=60)
    yield
    vane.configure(worker_idle_timeout_s=before)
    for pid in WARM.idle_pids():
        os.kill(pid, signal.SIGKILL)


def test_the_next_action_reuses_the_processes_but_constructs_the_udf_anew():
    first = run(concurrency=2)
    second = run(concurrency=2)
    assert len(pids(first)) == 2 and pids(second) == pids(first)
    # A new instance in each action: its state (calls counted, its id) starts over.
    assert set(first["born"].to_pylist()).isdisjoint(second["born"].to_pylist())
    assert sorted(second["calls"].to_pylist()) == sorted(first["calls"].to_pylist())
    assert pids(first) <= WARM.idle_pids()  # waiting for a third


def test_a_step_s_workers_start_as_it_is_built(monkeypatch):
    monkeypatch.setenv("VANE_TEST_WARM", uuid.uuid4().hex)  # no idle worker would do
    before = WARM.idle_pids()
    plan = vane.range(4).map_batches(
        WhoRuns, schema=SCHEMA, batch_size=2, execution_backend="subprocess_actor"
    )
    deadline = time.monotonic() + 60  # a cap on a busy machine, not a measurement
    while not WARM.idle_pids() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    (started,) = WARM.idle_pids() - before  # before any action
    assert pids(plan.to_arrow()) == {started}


def test_a_worker_imports_what_the_first_batch_needs_before_the_udf_comes():
    assert run()["warm"].to_pylist() == [True] * 4


def test_workers_started_differently_are_not_reused(monkeypatch):
    first = pids(run())
    monkeypatch.setenv("VANE_TEST_WARM", "another value")  # the workers' environment differs
    second = pids(run())
    assert second.isdisjoint(first)
    assert pids(run(cpus=1)).isdisjoint(first | second)  # OMP_NUM_THREADS=1 and the like
    monkeypatch.delenv("VANE_TEST_WARM")
    assert pids(run()) == first  # the first one still waits


class ImportsHelper(WhoRuns):
    def __init__(self) -> None:
        import warm_helper  # noqa: F401  (a module of the test's own, in tmp_path)

        super().__init__()


def test_a_worker_whose_modules_changed_on_disk_is_not_reused(tmp_path, monkeypatch):
    helper = tmp_path / "warm_helper.py"
    helper.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = pids(run(ImportsHelper))
    assert pids(run(ImportsHelper)) == first  # nothing changed
    stat = helper.stat()
    os.utime(helper, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # edited
    assert pids(run(ImportsHelper)).isdisjoint(first)


class ChangesItsEnvironment(WhoRuns):
    def __call__(self, batch: pa.Table) -> pa.Table:
        os.environ["VANE_TEST_STARTED_WITH"] = "changed"
        return super().__call__(batch)


class RemovesFromItsEnvironment(WhoRuns):
    def __call__(self, batch: pa.Table) -> pa.Table:
        os.environ.pop("VANE_TEST_STARTED_WITH", None)
        return super().__call__(batch)


@pytest.mark.parametrize("udf", [ChangesItsEnvironment, RemovesFromItsEnvironment])
def test_a_worker_whose_udf_changed_what_it_started_with_is_not_reused(udf, monkeypatch):
    monkeypatch.setenv("VANE_TEST_STARTED_WITH", "as started")
    (pid,) = pids(run(udf))
    assert gone(pid, within=60)  # it exited after its action instead of waiting
    assert pid not in pids(run())


class ImportsAModelLibrary(WhoRuns):
    def __init__(self) -> None:
        import sentence_transformers  # noqa: F401  (adds environment variables as it imports)

        super().__init__()


def test_a_worker_whose_libraries_added_environment_variables_is_reused():
    # A library that adds variables when it is imported must not cost every later action a
    # new worker and its imports
    first = pids(run(ImportsAModelLibrary))
    assert pids(run(ImportsAModelLibrary)) == first


def _sees_and_adds(batch: pa.Table) -> pa.Table:
    seen = os.environ.get("VANE_TEST_ADDED")
    os.environ["VANE_TEST_ADDED"] = "by an earlier action"
    n = batch.num_rows
    return pa.table({"pid": pa.array([os.getpid()] * n, pa.int64()), "seen": [seen] * n})


def test_variables_a_udf_added_do_not_reach_the_next_actions_udf():
    def action() -> list[dict]:
        return (
            vane.range(2)
            .map_batches(
                _sees_and_adds,
                schema={"pid": "BIGINT", "seen": "VARCHAR"},
                execution_backend="subprocess_actor",
            )
            .to_pylist()
        )

    first, second = action(), action()
    assert {r["pid"] for r in second} == {r["pid"] for r in first}  # the same worker, reused
    assert {r["seen"] for r in second} == {None}  # without what the first action's UDF added


class DiesOnce(WhoRuns):
    """Kills its worker on its first call, once: the pid is left in ``<directory>/died``."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.mark = Path(directory) / "died"

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.mark.exists():
            self.mark.write_text(str(os.getpid()))
            os._exit(3)
        return super().__call__(batch)


def test_a_crashed_worker_is_not_reused(tmp_path):
    run()  # a worker waits, and the next action takes it
    out = run(DiesOnce, fn_constructor_args=(str(tmp_path),))
    crashed = int((tmp_path / "died").read_text())
    assert gone(crashed, within=60)
    assert crashed not in pids(out) and crashed not in WARM.idle_pids()
    # A worker killed while it waits is not handed out either.
    (idle,) = pids(out)
    assert idle in WARM.idle_pids()
    os.kill(idle, signal.SIGKILL)
    assert gone(idle, within=60)
    assert idle not in pids(run())


def test_idle_workers_end_after_the_timeout_or_with_the_action():
    vane.configure(worker_idle_timeout_s=0.5)
    (pid,) = pids(run())
    assert gone(pid, within=60)  # ended by the timeout, not by the next action
    vane.configure(worker_idle_timeout_s=0)
    (pid,) = pids(run())
    assert pid not in WARM.idle_pids() and gone(pid, within=60)


def test_a_shorter_timeout_ends_the_workers_idle_longer_at_once():
    vane.configure(worker_idle_timeout_s=600)
    (pid,) = pids(run())
    vane.configure(worker_idle_timeout_s=0.5)  # now, not at the deadline 600 s gave it
    assert gone(pid, within=60)


def test_a_gpu_s_idle_worker_gives_way_to_a_worker_started_otherwise(monkeypatch):
    # One device, named (nothing here touches it): a worker that ran a UDF on it keeps what
    # its model library cached there, so it is ended once a worker started another way (its
    # threads, here) is about to use the device, not left waiting beside it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    (first,) = pids(run(gpus=1))
    assert first in WARM.idle_pids()
    (second,) = pids(run(gpus=1, cpus=1))
    assert second != first and first not in WARM.idle_pids() and gone(first, within=60)
    assert pids(run(gpus=1, cpus=1)) == {second}  # one started the same way is taken
    # Without a device named, an idle worker of another start stays (as before)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    (third,) = pids(run())
    pids(run(cpus=1))
    assert third in WARM.idle_pids()


def test_the_timeout_is_checked():
    with pytest.raises(vane.errors.ConfigurationError, match="worker_idle_timeout_s"):
        vane.configure(worker_idle_timeout_s=-1)


@pytest.mark.timeout(120)
def test_no_worker_outlives_its_interpreter(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            import pyarrow as pa
            import vane

            def pid(batch):
                return pa.table({"pid": pa.array([os.getpid()] * batch.num_rows, pa.int64())})

            vane.configure(progress=False, worker_idle_timeout_s=600)
            out = vane.range(4).map_batches(
                pid, schema={"pid": "BIGINT"}, execution_backend="subprocess_task", concurrency=2
            )
            print(sorted(set(out.to_arrow()["pid"].to_pylist())))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=100,
    )
    workers = eval(done.stdout.strip().splitlines()[-1])
    assert workers and all(gone(pid, within=30) for pid in workers)
