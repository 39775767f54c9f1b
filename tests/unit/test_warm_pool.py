"""The warm pool's bookkeeping (vane/execution/actors/warm.py) around a worker whose start
fails. Workers themselves: tests/integration/test_warm_workers.py."""

from __future__ import annotations

import math
import os
import time

import pytest

import vane
from vane.config import Config
from vane.execution.actors.warm import WarmPool, WorkerKey


@pytest.mark.parametrize("timeout", [600, math.inf])
def test_a_worker_whose_start_failed_is_dropped_and_the_reaper_waits(tmp_path, timeout):
    # A start that fails (here: its working directory is gone) leaves nothing to end: the pool
    # drops it, and its reaper goes back to waiting. With no limit to the idle time, the
    # failed start's deadline was -inf + inf: never reached, and a wait of NaN, which returns at
    # once, so the reaper spun, holding the pool's lock.
    vane.configure(worker_idle_timeout_s=timeout)
    pool = WarmPool()
    try:
        gone = tmp_path / "gone"
        gone.mkdir()
        key = WorkerKey.of(dict(os.environ), 1, 1 << 20)
        key = WorkerKey(key.executable, key.env, str(gone), key.slots, key.slot_limit, False)
        gone.rmdir()
        pool.prestart(key, 1)
        guard = time.monotonic() + 60
        while True:
            with pool._lock:
                waiting = bool(pool._changed._waiters)  # type: ignore[attr-defined]
                dropped = not pool._entries
            if waiting and dropped:
                break
            assert time.monotonic() < guard, "the failed start stayed, or the reaper never waits"
            time.sleep(0.01)
        # and a prestart of the same key starts one again (the failed one no longer counts);
        # its folder is back, so this start succeeds and stays (a second failed start could
        # be dropped by the reaper before the test looks, as it once was on a busy machine)
        gone.mkdir()
        pool.prestart(key, 1)
        with pool._lock:
            (entry,) = pool._entries
        worker = entry.started.result(timeout=120)
        with pool._lock:
            assert pool._entries == [entry]
        assert worker.process.poll() is None
        pool.close()
        worker.process.wait(timeout=120)
    finally:
        pool.close()  # (again, if an assertion failed first: no worker outlives the test)
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)
