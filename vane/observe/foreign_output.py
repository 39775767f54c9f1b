"""While the progress display is drawn, what else reaches this process's stderr as a file (fd 2)
is printed above the progress lines, not into them.

Python's own writes (``sys.stderr``, warnings, logging) already go through rich, which prints
them above the display. Writes to the file descriptor itself pass it by and land after the line
being drawn, which is then left broken on the screen: a C library's log line (Ray's core worker
logs errors to fd 2, once per run on every Ray run), a child process that inherited fd 2, a
handler that kept the ``sys.stderr`` of before the display. So while the display is up, fd 2 is
a pipe: a thread reads it and gives each line to the display, which draws on a duplicate of the
terminal's descriptor. When the display ends, fd 2 is the terminal again, and every line
written before has been printed; what a child that is still running writes later goes straight
to the terminal.

What this cannot save: a process killed right after writing (a C library's last words before
``abort()``) may die before the thread has printed what it read. faulthandler, if enabled,
writes to the terminal directly meanwhile, so a crash's traceback is never in the pipe.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
from collections.abc import Callable
from typing import TextIO

# Written into the pipe by ``stop`` once fd 2 is the terminal again: what came before it is all
# that was written while the display was up. (Writes of up to PIPE_BUF bytes are never split.)
_END = b"\x00vane: the progress display ended\x00"
_LONGEST_LINE = 1 << 16  # a line without an end is shown in pieces this long

_lock = threading.Lock()
_active = False  # one display at a time has fd 2's output


class ForeignOutput:
    """fd 2 through a pipe while a display is drawn: ``take``, ``start``, ``stop``, ``close``."""

    def __init__(self, terminal: int) -> None:
        self._terminal = terminal  # a duplicate of fd 2 as it was: the terminal
        # The display's stream, on the terminal whatever fd 2 is meanwhile.
        self.stream: TextIO = open(  # noqa: SIM115 (closed by close())
            terminal, "w", encoding="utf-8", errors="replace", closefd=False
        )
        self._write = -1
        self._show: Callable[[str], None] = self._raw
        self._ended = threading.Event()
        self._faulthandler = False

    @classmethod
    def take(cls) -> ForeignOutput | None:
        """fd 2's output for one display; None while another display has it."""
        global _active
        with _lock:
            if _active:
                return None
            _active = True
        return cls(os.dup(2))

    def start(self, show: Callable[[str], None]) -> None:
        """From now on, each line written to fd 2 goes to ``show``, which prints it above the
        display."""
        self._show = show
        sys.stderr.flush()
        read, self._write = os.pipe()
        os.dup2(self._write, 2)
        if faulthandler.is_enabled():
            self._faulthandler = True
            faulthandler.enable(file=self.stream)
        threading.Thread(target=self._pump, args=(read,), daemon=True, name="vane-fd2").start()

    def stop(self) -> None:
        """Give fd 2 back to the terminal, once every line written before is shown."""
        if self._write < 0:
            return
        os.dup2(self._terminal, 2)
        if self._faulthandler:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr)
        os.write(self._write, _END)
        os.close(self._write)
        self._write = -1
        self._ended.wait()

    def close(self) -> None:
        """Let go of the terminal, once the display has drawn its last."""
        global _active
        self.stream.close()
        os.close(self._terminal)
        with _lock:
            _active = False

    def _raw(self, line: str) -> None:
        """A line as it is, on the terminal: when the display cannot show it."""
        os.write(self._terminal, line.encode(errors="replace") + b"\n")

    def _pump(self, read: int) -> None:
        pending = b""
        try:
            while chunk := os.read(read, 65536):
                if self._ended.is_set():  # a child that kept fd 2 writes on: to the terminal
                    os.write(2, chunk)
                    continue
                pending += chunk
                before, end, after = pending.partition(_END)
                *lines, pending = before.split(b"\n")
                if end:
                    lines.append(pending)  # the last line, though unended
                    pending = b""
                while len(pending) > _LONGEST_LINE:
                    lines.append(pending[:_LONGEST_LINE])
                    pending = pending[_LONGEST_LINE:]
                for line in lines:
                    # What a terminal would show of it: the text after its last carriage return.
                    shown = line.rstrip(b"\r").rsplit(b"\r", 1)[-1].decode(errors="replace")
                    if shown.strip():
                        try:
                            self._show(shown)
                        except Exception:  # the display failed: the line still shows
                            self._raw(shown)
                if end:
                    self._ended.set()
                    if after:
                        os.write(2, after)
        finally:
            self._ended.set()  # (an error here must not leave stop() waiting)
            with contextlib.suppress(OSError):
                os.close(read)
