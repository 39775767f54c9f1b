"""What waits idle between actions and ends after ``worker_idle_timeout_s`` unused: the local
warm pool's worker processes (``actors/warm.py``) and Ray's kept hosts (``ray/parked.py``).

``IdleRegister`` keeps the entries, oldest first, under one lock, and one reaper thread per
register, started with its first entry, ends each once its idle time passes the timeout. The
timeout is read again whenever the register changes (an entry added, one that was starting
now up) and whenever ``configure`` changes it (``wake``, registered with
``config.watch_idle_timeout``): a shorter one ends at once what has waited longer, rather
than at the old deadline (up to an hour with ``math.inf``)."""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from vane.config import get_config, watch_idle_timeout

# The longest a reaper sleeps at once (then it looks again): a timeout of math.inf is not a
# number Condition.wait takes.
LONGEST_WAIT_S = 3600.0

E = TypeVar("E")


class IdleRegister(abc.ABC, Generic[E]):
    """Entries waiting for an action, each ended (``_end``) once idle longer than the timeout.
    A subclass says since when an entry is idle (``_idle_since``: None while it is not idle
    yet, such as a process still starting, whose start calls ``wake``), whether it died
    while idle (``_gone``: ended at once), and how entries end (``_end``, called outside the
    lock). Thread-safe: actions may run side by side."""

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._entries: list[E] = []  # oldest first
        self._reaper: threading.Thread | None = None
        self._name = name
        watch_idle_timeout(self.wake)

    @staticmethod
    def timeout() -> float:
        return get_config().worker_idle_timeout_s

    @abc.abstractmethod
    def _idle_since(self, entry: E) -> float | None: ...

    def _gone(self, entry: E) -> bool:
        return False

    @abc.abstractmethod
    def _end(self, entries: list[E]) -> None: ...

    def _add_locked(self, entry: E) -> None:
        """Keep ``entry``, the newest (the caller holds the lock)."""
        self._entries.append(entry)
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, daemon=True, name=self._name)
            self._reaper.start()
        self._changed.notify()

    def _take_where(self, matches: Callable[[E], bool]) -> list[E]:
        """Remove and return the entries ``matches`` holds for, oldest first."""
        taken: list[E] = []
        kept: list[E] = []
        with self._lock:
            for entry in self._entries:
                (taken if matches(entry) else kept).append(entry)
            self._entries = kept
        return taken

    def wake(self) -> None:
        """Read the timeout and the deadlines again now (``configure`` changed the timeout, or
        an entry that was starting is up)."""
        with self._lock:
            self._changed.notify()

    def _reap(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                timeout = self.timeout()
                expired: list[E] = []
                wait: float | None = None
                for entry in list(self._entries):
                    since = self._idle_since(entry)
                    if since is None:
                        continue  # not idle yet: its start notifies
                    left = since + timeout - now
                    # (not "<= 0": a left that is no number, as inf - inf, ends the entry rather
                    # than becoming a wait that returns at once, a reaper spinning on the lock)
                    if not left > 0 or self._gone(entry):
                        self._entries.remove(entry)
                        expired.append(entry)
                    else:
                        wait = left if wait is None else min(wait, left)
                if not expired:
                    self._changed.wait(None if wait is None else min(wait, LONGEST_WAIT_S))
                    continue
            self._end(expired)
