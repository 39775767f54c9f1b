"""``in_background``: work begun on a thread of its own, its answer or its error waited for
later (an actor pool's start, DuckDB's settings for a resumable write, a Ray dataset's build)."""

from __future__ import annotations

import threading

import pytest

from vane.execution.background import in_background


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
