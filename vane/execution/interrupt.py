"""Ctrl-C during an action: one SIGINT stops the job within a second or two.

Python runs its SIGINT handler only on the main thread, between bytecodes. While an action
runs, that thread mostly waits inside DuckDB or Arrow (C++), and the UDF stage they pull from
may wait on a batch that never ends (a hung UDF): nothing would ever run the handler. So the
C-level handler also writes the signal's number to a pipe (``signal.set_wakeup_fd``), and a
watcher thread reading that pipe cancels every running action while one runs on the main thread:
each UDF stage aborts its pool (every waiting batch fails at once, worker processes are killed,
hung threads are abandoned) and each DuckDB cursor is interrupted. The main thread comes back
from C++ with some error, which the action turns into ``KeyboardInterrupt`` (``local._action``).
That error may come first (Python's handler raised inside a Python stream DuckDB reads on the
main thread: DuckDB's "reading the Arrow source failed"), before the watcher has read the pipe:
an action ending in an error reads the pipe itself, so the signal is never missed.

The pipe is installed once per process, by the first action on the main thread, and stays:
an action may end on any thread (a stream closed on another one), where the wakeup fd cannot
be set, so there is nothing to undo at its end. A wakeup fd that was there before (an event
loop's) still hears of every signal: the watcher passes each on.

Python's own handler still runs as usual: this only helps the default behaviour along. With a
SIGINT handler of the user's own, or SIGINT ignored, vane does nothing on SIGINT.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
# Live actions that began on the main thread under Python's own SIGINT handler: while there is
# one, a SIGINT cancels every live action (as Python's KeyboardInterrupt stops the main thread).
_main_actions = 0
_wakeup: int | None = None  # the pipe's write end, once the watcher runs
_read: int | None = None  # its read end
_reading = threading.RLock()  # held by whoever reads the pipe, until it has acted on what it read
_forward: _Target | None = None  # the wakeup fd that vane's stands in for


@dataclass(frozen=True)
class _Target:
    """A wakeup fd that was installed before vane's, which still hears of every signal. It is
    known by its file too: once its owner closes it, the number may name another file."""

    fd: int
    device: int
    inode: int

    @staticmethod
    def of(fd: int) -> _Target | None:
        if fd < 0:
            return None
        try:
            stat = os.fstat(fd)
        except OSError:
            return None
        return _Target(fd, stat.st_dev, stat.st_ino)

    def write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            stat = os.fstat(self.fd)
            if (stat.st_dev, stat.st_ino) == (self.device, self.inode):
                os.write(self.fd, data)


def _watch(read_fd: int) -> None:
    poller = select.poll()  # (select.select refuses a descriptor from 1024 on)
    poller.register(read_fd, select.POLLIN)
    while True:
        poller.poll()
        if not _hear(read_fd):
            return  # the pipe's write end is gone


def _hear(read_fd: int) -> bool:
    """Act on the signals in the pipe (none: return at once). The watcher thread calls it when
    the pipe has something; an action ending in an error calls it too
    (``cancelled_by_sigint``), since its error may be a Ctrl-C's that the watcher has not yet
    acted on. One reader at a time,
    which acts on what it read before the next may read: whoever comes second finds the
    actions already cancelled. (Re-entrant: a stream that the garbage collector closes while
    this thread is here may end its action here too.) False once the pipe is closed."""
    with _reading:
        while True:
            try:
                data = os.read(read_fd, 64)
            except (BlockingIOError, InterruptedError):
                return True
            if not data:
                return False
            forward = _forward
            if forward is not None:
                forward.write(data)
            ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            if signal.SIGINT in data and ours:
                with _lock:
                    live = list(_live) if _main_actions else []
                for cancellation in live:
                    cancellation.cancel()


def _install() -> None:
    """Make vane's pipe the process's wakeup fd (on the main thread, under ``_lock``). Done by
    the first action, and again by a later one only if something replaced it meanwhile; never
    undone, so an action that ends on another thread (a stream closed there) leaves nothing to
    restore. The fd it replaces hears every signal through the watcher."""
    global _wakeup, _read, _forward
    if _wakeup is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        os.set_blocking(read_fd, False)  # read only what is there (``_hear``)
        threading.Thread(target=_watch, args=(read_fd,), name="vane-sigint", daemon=True).start()
        _wakeup, _read = write_fd, read_fd
    previous = signal.set_wakeup_fd(_wakeup, warn_on_full_buffer=False)
    if previous != _wakeup:
        _forward = _Target.of(previous)


def _forget_in_child() -> None:
    """A forked child has vane's pipe, shared with its parent, but not the watcher thread: it
    lets go of the pipe (its signals are its own), and its first action starts its own."""
    global _wakeup, _read, _forward, _main_actions, _lock, _reading
    if _wakeup is not None:
        with contextlib.suppress(ValueError, OSError):
            current = signal.set_wakeup_fd(-1)
            if current != _wakeup:
                signal.set_wakeup_fd(current)  # someone else's: left as it was
    _wakeup, _read, _forward, _main_actions = None, None, None, 0
    _lock, _reading = threading.Lock(), threading.RLock()
    _live.clear()


os.register_at_fork(after_in_child=_forget_in_child)


@contextmanager
def cancelled_by_sigint(cancellation: Cancellation) -> Iterator[None]:
    """While the block runs, a SIGINT to this process cancels ``cancellation``."""
    global _main_actions
    main = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    with _lock:
        if main:
            _install()
            _main_actions += 1
        _live.add(cancellation)
    try:
        yield
    except GeneratorExit:
        raise  # a stream closed early: nothing failed
    except BaseException:
        # A Ctrl-C's error (DuckDB's or Arrow's for a KeyboardInterrupt raised inside a Python
        # source it read) may reach here before the watcher thread has read the signal from the
        # pipe: it is heard now, so the action knows it was cancelled.
        if main and _read is not None:
            _hear(_read)
        raise
    finally:
        # (it may end on another thread: a stream closed there)
        with _lock:
            _live.discard(cancellation)
            if main:
                _main_actions -= 1
