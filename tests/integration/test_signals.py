"""Signals to a real driver process: one Ctrl-C stops a job over a hung UDF within seconds and
raises KeyboardInterrupt, whatever the action; a SIGKILLed driver takes its workers with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from tests.integration import udfs
from tests.integration.support import gone, udf_spec

ROOT = str(Path(__file__).resolve().parents[2])

DRIVER = """
import sys
import vane
from tests.integration import udfs

vane.configure(progress=False)
backend, action, pid_dir, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rel = vane.range(100).map_batches(
    udfs.HangAlways,
    schema={"id": "BIGINT"},
    batch_size=10,
    execution_backend=backend,
    concurrency=concurrency,
    fn_constructor_args=(pid_dir,),
)
if action == "count":
    rel.count()
elif action == "to_arrow":
    rel.to_arrow()
elif action == "write_parquet":
    rel.write_parquet("out")
elif action == "write_parquet_partitioned":
    rel.with_column("p", "id % 2").write_parquet("out", partition_by="p")
elif action == "write_json":
    rel.write_json("out")
print("the action returned", flush=True)
"""

ACTIONS = ["count", "to_arrow", "write_parquet", "write_parquet_partitioned", "write_json"]


def _start_driver(  # type: ignore[no-untyped-def]
    tmp_path: Path, backend: str, action: str, concurrency: int = 1, group: bool = False
):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    pids = tmp_path / "pids"
    pids.mkdir()
    driver = subprocess.Popen(
        [sys.executable, str(script), backend, action, str(pids), str(concurrency)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        start_new_session=group,  # its own process group, as a job in a terminal has
    )
    deadline = time.monotonic() + 60
    while len(os.listdir(pids)) < concurrency:  # every actor is inside the hung call
        if driver.poll() is not None or time.monotonic() > deadline:
            driver.kill()
            pytest.fail(f"the driver never reached the UDF:\n{driver.communicate()[1]}")
        time.sleep(0.05)
    return driver, [int(name) for name in os.listdir(pids)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_one_ctrl_c_stops_the_job_with_keyboard_interrupt(tmp_path, backend, action):
    driver, pids = _start_driver(tmp_path, backend, action)
    driver.send_signal(signal.SIGINT)
    try:
        out, err = driver.communicate(timeout=60)  # catches a hang, measures nothing
    except subprocess.TimeoutExpired:
        driver.kill()
        pytest.fail(f"the driver did not stop on SIGINT:\n{driver.communicate()[1]}")
    assert "\nKeyboardInterrupt\n" in err, err
    assert "Query interrupted" not in err and "the action returned" not in out
    assert "starting a replacement" not in err  # nothing new starts while stopping
    assert not (tmp_path / "out").exists()  # a write commits nothing
    if backend == "subprocess_actor":
        assert gone(pids[0], within=10)


@pytest.mark.timeout(120)
def test_ctrl_c_in_a_terminal_reaches_the_workers_too_and_nothing_restarts(tmp_path):
    # A terminal sends SIGINT to the whole foreground process group, workers included.
    driver, pids = _start_driver(tmp_path, "subprocess_actor", "count", concurrency=2, group=True)
    os.killpg(driver.pid, signal.SIGINT)
    try:
        _, err = driver.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        driver.kill()
        pytest.fail(f"the driver did not stop on SIGINT:\n{driver.communicate()[1]}")
    assert "\nKeyboardInterrupt\n" in err and "starting a replacement" not in err, err
    assert all(gone(pid, within=10) for pid in pids)


@pytest.mark.timeout(120)
def test_workers_die_with_a_sigkilled_driver(tmp_path):
    driver, pids = _start_driver(tmp_path, "subprocess_actor", "count", concurrency=2)
    assert os.getpid() not in pids and len(pids) == 2
    driver.kill()
    driver.wait()
    assert all(gone(pid, within=10) for pid in pids)


@pytest.mark.timeout(120)
def test_a_worker_exits_when_its_request_pipe_closes_even_mid_batch(tmp_path):
    # The portable path, without the parent-death signal: this test process stays alive and
    # only closes its end of the worker's request pipe while the UDF hangs.
    from vane.execution.actors import ipc
    from vane.udf.runtime import Task
    from vane.udf.shipping import pickled_spec

    spec = udf_spec(udfs.HangAlways, backend="subprocess_actor", constructor_args=(str(tmp_path),))
    request_r, request_w = os.pipe()
    result_r, result_w = os.pipe()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vane.execution.actors._worker",
            str(request_r),
            str(result_w),
            str(os.getpid()),
        ],
        pass_fds=(request_r, result_w),
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    os.close(request_r)
    os.close(result_w)
    schema = pa.schema([("id", pa.int64())])
    init = {"schema": schema, "step": "HangAlways", "sys_path": sys.path}
    ipc.write_frame(request_w, ipc.INIT, pickled_spec(spec, init))
    assert ipc.read_frame(result_r)[0] == ipc.READY
    task = Task(0, 0, pa.table({"id": [1, 2, 3]}, schema=schema))
    ipc.write_frame(request_w, ipc.BATCH, *ipc.batch_parts(0, task))
    while not os.listdir(tmp_path):  # the batch is running, and hangs
        time.sleep(0.05)
    os.close(request_w)
    try:
        assert worker.wait(timeout=10) != 0
    finally:
        worker.kill()
        os.close(result_r)


def _signals_self(batch: pa.Table) -> pa.Table:
    os.kill(os.getpid(), signal.SIGUSR1)
    return batch


def _heard(read_fd: int, signum: int) -> bool:
    """Whether ``signum`` arrives on a wakeup pipe (waiting for a hang, at most)."""
    deadline = time.monotonic() + 60
    heard = b""
    os.set_blocking(read_fd, False)
    while signum not in heard and time.monotonic() < deadline:
        try:
            heard += os.read(read_fd, 64)
        except BlockingIOError:
            time.sleep(0.01)
    return signum in heard


def test_a_wakeup_fd_of_the_callers_still_hears_signals_during_and_after_an_action():
    import vane
    from vane.execution import interrupt

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    handler = signal.signal(signal.SIGUSR1, lambda *_: None)
    theirs = signal.set_wakeup_fd(write_fd)
    try:
        assert vane.range(3).map_batches(_signals_self, schema={"id": "BIGINT"}).count() == 3
        assert _heard(read_fd, signal.SIGUSR1)
        # vane's pipe stays installed, in front of the caller's, which still hears every signal
        assert signal.set_wakeup_fd(interrupt._wakeup) == interrupt._wakeup
        os.kill(os.getpid(), signal.SIGUSR1)
        assert _heard(read_fd, signal.SIGUSR1)
    finally:
        signal.set_wakeup_fd(theirs)
        signal.signal(signal.SIGUSR1, handler)
        os.close(read_fd)
        os.close(write_fd)


def test_duckdbs_own_answer_to_a_ctrl_c_is_keyboard_interrupt():
    """DuckDB, running a query on the main thread, runs Python's SIGINT handler itself and
    answers ``RuntimeError("Query interrupted")``, at times (about one Ctrl-C in six on a
    2-core machine) before vane's watcher thread has heard of the signal and cancelled the
    action: the action raises KeyboardInterrupt all the same."""
    from vane.execution.local import _action

    def duckdb_interrupted_first() -> None:
        with _action(vane.range(3).plan) as execution:
            assert not execution.cancellation.cancelled  # the watcher has not acted yet
            raise RuntimeError("Query interrupted")  # what DuckDB raised then

    with pytest.raises(KeyboardInterrupt):
        duckdb_interrupted_first()


def test_a_closed_wakeup_fd_of_the_callers_hears_nothing_more_from_vane():
    # Once closed, its number may name another file: vane writes only to the file it replaced.
    from vane.execution.interrupt import _Target

    read_fd, write_fd = os.pipe()
    theirs = _Target.of(write_fd)
    assert theirs is not None
    os.close(write_fd)
    os.close(read_fd)
    other_r, other_w = os.pipe()
    try:
        same_number = _Target(other_w, theirs.device, theirs.inode)  # as if reused
        same_number.write(bytes([signal.SIGINT]))
        os.set_blocking(other_r, False)
        with pytest.raises(BlockingIOError):
            os.read(other_r, 64)
        _Target.of(other_w).write(bytes([signal.SIGINT]))  # type: ignore[union-attr]
        assert os.read(other_r, 64) == bytes([signal.SIGINT])
    finally:
        os.close(other_r)
        os.close(other_w)


def _run_script(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``text`` run as a script of its own (its signals are its own), with vane importable."""
    script = tmp_path / "driver.py"
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script), *args],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=100,
    )


AFTER_CTRL_C = """
import os
import signal
import sys
import threading

import pyarrow as pa

import vane
from tests.integration import udfs
from vane.execution import interrupt

vane.configure(progress=False)
backend = sys.argv[1]


def noop(batch):
    return batch


schema = {"id": "BIGINT"}
# A stream begun on the main thread and closed on another: its action ends over there.
rel = vane.range(100).map_batches(noop, schema=schema, execution_backend=backend)
stream = rel.iter_batches(10)
next(stream)
closer = threading.Thread(target=stream.close)
closer.start()
closer.join()
try:
    rel = vane.range(10).map_batches(
        udfs.CtrlC, schema=schema, execution_backend=backend, fn_constructor_args=(os.getpid(),)
    )
    rel.count()
except KeyboardInterrupt:
    print("interrupted", flush=True)
for _ in range(3):
    rel = vane.range(50).map_batches(noop, schema=schema, execution_backend=backend)
    print("counted", rel.count(), flush=True)
print("watchers", sum(t.name == "vane-sigint" for t in threading.enumerate()))
forward = interrupt._forward
print("forwards to itself", forward is not None and forward.fd == interrupt._wakeup)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_after_a_ctrl_c_later_actions_run_as_usual(tmp_path, backend):
    # One action ended on another thread, then one Ctrl-C: every later action must succeed,
    # with one watcher thread, which never passes the signal back to its own pipe.
    done = _run_script(tmp_path, AFTER_CTRL_C, backend)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "interrupted",
        "counted 50",
        "counted 50",
        "counted 50",
        "watchers 1",
        "forwards to itself False",
    ], done.stderr


UNHEARD = """
import signal
import sys
import tempfile
import threading

import pyarrow as pa

import vane
from vane.execution import interrupt

vane.configure(progress=False)
action = sys.argv[1]
# The watcher thread never gets to read the pipe: the signal is heard only as the action's
# error reaches it, as when the watcher is slower than the main thread.
interrupt._watch = lambda read_fd: threading.Event().wait()
schema = pa.schema([("id", pa.int64())])


def batches():
    yield pa.record_batch([pa.array([0, 1])], schema=schema)
    signal.raise_signal(signal.SIGINT)  # on the main thread, inside DuckDB's read of the stream
    yield pa.record_batch([pa.array([2, 3])], schema=schema)


rel = vane.from_arrow(pa.RecordBatchReader.from_batches(schema, batches())).filter("id >= 0")
try:
    if action == "to_arrow":
        rel.to_arrow()
    elif action == "count":
        rel.count()
    elif action == "iter_batches":
        for _ in rel.iter_batches(1):
            pass
    else:
        rel.write_parquet(tempfile.mkdtemp() + "/out/")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("action", ["to_arrow", "count", "iter_batches", "write_parquet"])
def test_a_ctrl_c_the_watcher_has_not_heard_yet_is_keyboard_interrupt(tmp_path, action):
    # A KeyboardInterrupt raised in a Python stream DuckDB reads on the main thread comes back
    # as DuckDB's error for the stream ("Unknown error"), possibly before the watcher thread has
    # read the signal: the action hears it itself, and raises KeyboardInterrupt.
    done = _run_script(tmp_path, UNHEARD, action)
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr


MANY_FILES = """
import os
import resource
import signal
import threading

import vane
from tests.integration import udfs

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < 2048:
    print("skip: the hard limit on open files is", hard, flush=True)
    raise SystemExit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
held = [os.dup(0) for _ in range(1100)]  # vane's pipe gets a descriptor past 1024
vane.configure(progress=False)


try:
    vane.range(10).map_batches(
        udfs.CtrlC, schema={"id": "BIGINT"}, fn_constructor_args=(os.getpid(),)
    ).filter("id >= 0").to_arrow()  # (the main thread waits in DuckDB, which reads the step)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_ctrl_c_is_heard_in_a_process_with_many_open_files(tmp_path):
    # select() refuses a descriptor from 1024 on: the watcher of the signal pipe would die,
    # and a Ctrl-C would never stop a hung UDF (the main thread waits in DuckDB).
    done = _run_script(tmp_path, MANY_FILES)
    if done.stdout.startswith("skip:"):
        pytest.skip(done.stdout.strip())
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr
    assert "Exception in thread" not in done.stderr, done.stderr
