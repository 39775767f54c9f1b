"""The reaper both registers of idle things share (vane/execution/idle.py): here a register of
plain entries, each ended by being recorded."""

from __future__ import annotations

import math
import time

import pytest

import vane
from vane.config import Config
from vane.execution.idle import IdleRegister


class _Register(IdleRegister[float]):
    """Entries that are their own idle-since time; ending one records it."""

    def __init__(self) -> None:
        super().__init__("test-idle")
        self.ended: list[float] = []

    def add(self, since: float) -> None:
        with self._lock:
            self._add_locked(since)

    def _idle_since(self, entry: float) -> float:
        return entry

    def _end(self, entries: list[float]) -> None:
        self.ended.extend(entries)


@pytest.mark.parametrize("since", [-math.inf, math.nan])
def test_an_entry_whose_deadline_is_no_number_is_ended_and_the_reaper_waits(since):
    # Under no limit to the idle time, an entry idle since -inf (or since NaN) has a deadline
    # that is no number: it is ended, and the reaper goes back to waiting, where a wait of
    # NaN returned at once and the reaper spun on the lock
    vane.configure(worker_idle_timeout_s=math.inf)
    try:
        register = _Register()
        register.add(time.monotonic())  # an ordinary entry: it stays
        register.add(since)
        guard = time.monotonic() + 60
        while True:
            with register._lock:
                done = len(register.ended) == 1 and len(register._entries) == 1
                waiting = bool(register._changed._waiters)  # type: ignore[attr-defined]
            if done and waiting:
                break
            assert time.monotonic() < guard, "the entry stayed, or the reaper never waits"
            time.sleep(0.01)
        assert math.isnan(register.ended[0]) or register.ended[0] == -math.inf
    finally:
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)
