"""``in_background``: work begun on a thread of its own, its answer or its error waited for
later (an actor pool's start, DuckDB's settings as the database opens, a Ray dataset's build)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from vane._background import in_background


def test_the_caller_goes_on_while_the_work_runs_and_gets_its_answer():
    release = threading.Event()
    names: list[str] = []

    def work() -> int:
        names.append(threading.current_thread().name)
        release.wait()
        return 42

    future = in_background(work, "vane-test-work")
    assert not future.done()  # (the work waits for the caller: it has not returned)
    release.set()
    assert future.result() == 42
    assert names == ["vane-test-work"]


@pytest.mark.parametrize("error", [ValueError("bad value"), KeyboardInterrupt()])
def test_what_the_work_raises_is_raised_to_whoever_waits(error):
    def work() -> None:
        raise error

    future = in_background(work, "vane-test-fail")
    with pytest.raises(type(error)):
        future.result()


def test_work_on_a_thread_that_is_no_daemon_ends_before_the_interpreter_does(tmp_path):
    """The database's settings are asked on such a thread (``_engine``): a process that exits
    while the query runs waits for it (a daemon stopped inside DuckDB aborts the process).
    Here the work begins only once the main thread has written its last file, as it exits."""
    script = f"""
import pathlib, time
from vane._background import in_background
folder = pathlib.Path({str(tmp_path)!r})
def work():
    while not (folder / "exiting").exists():
        time.sleep(0.01)
    (folder / "done").write_text("done")
in_background(work, "vane-test-exit", daemon=False)
(folder / "exiting").write_text("")
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert (tmp_path / "done").read_text() == "done"
