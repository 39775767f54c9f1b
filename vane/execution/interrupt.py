"""Ctrl-C during an action: one SIGINT stops the job within a second or two.

Python runs its SIGINT handler only on the main thread, between bytecodes. While an action
runs, that thread mostly waits inside DuckDB or Arrow (C++), and the UDF stage they pull from
may wait on a batch that never ends (a hung UDF): nothing would ever run the handler. So while an
action runs on the main thread, the C-level handler also writes the signal's number to a pipe
(``signal.set_wakeup_fd``), and a watcher thread reading that pipe cancels every running action:
each UDF stage aborts its pool (every waiting batch fails at once, worker processes are killed,
hung threads are abandoned) and each DuckDB cursor is interrupted. The main thread comes back
from C++ with some error, which the action turns into ``KeyboardInterrupt`` (``local._action``).

Python's own handler still runs as usual: this only helps the default behaviour along. With a
SIGINT handler of the user's own, or SIGINT ignored, vane does nothing on SIGINT.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from vane.errors import ExecutionError

log = logging.getLogger("vane")


class Interrupted(ExecutionError):
    """What waits inside an interrupted action fail with; the action raises
    ``KeyboardInterrupt`` instead (never seen by users)."""


class Cancellation:
    """Set once, by Ctrl-C; the parts of an action register what to do then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.cancelled = False

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the action is cancelled (now, if it already is)."""
        with self._lock:
            if not self.cancelled:
                self._callbacks.append(callback)
                return
        _call(callback)

    def cancel(self) -> None:
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call(callback)


def _call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # one part failing to stop must not keep the others running
        log.debug("stopping part of an interrupted action failed", exc_info=True)


_lock = threading.Lock()
_live: set[Cancellation] = set()
_wakeup: int | None = None  # the pipe's write end, once the watcher runs
_installed = 0  # actions on the main thread that have the wakeup fd installed
_previous = -1  # the wakeup fd to restore when the last of them ends


def _watch(read_fd: int) -> None:
    while True:
        data = os.read(read_fd, 64)
        if _previous >= 0:
            # The wakeup fd this one stands in for (an asyncio loop's, say) still hears of every
            # signal, as it would have without vane.
            with contextlib.suppress(OSError):
                os.write(_previous, data)
        if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            with _lock:
                live = list(_live)
            for cancellation in live:
                cancellation.cancel()


def _wakeup_fd() -> int:
    global _wakeup
    if _wakeup is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        threading.Thread(target=_watch, args=(read_fd,), name="vane-sigint", daemon=True).start()
        _wakeup = write_fd
    return _wakeup


@contextmanager
def cancelled_by_sigint(cancellation: Cancellation) -> Iterator[None]:
    """While the block runs, a SIGINT to this process cancels ``cancellation``."""
    global _installed, _previous
    install = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    with _lock:
        _live.add(cancellation)
        if install:
            if _installed == 0:
                _previous = signal.set_wakeup_fd(_wakeup_fd(), warn_on_full_buffer=False)
            _installed += 1
    try:
        yield
    finally:
        with _lock:
            _live.discard(cancellation)
            if install:
                _installed -= 1
                if _installed == 0:
                    # ValueError: ended on another thread (a stream closed by the collector).
                    with contextlib.suppress(ValueError):
                        signal.set_wakeup_fd(_previous)
