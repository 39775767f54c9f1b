"""The process between vane and a server it started: it holds the server to its parent's life.

Run as a script (``python .../_server_process.py``), not as ``-m vane...``: it uses the
standard library only, so it starts in milliseconds and needs nothing importable but itself.

``watch PARENT -- COMMAND...``: started by vane in a process group of its own, with
``PR_SET_PDEATHSIG`` set so that the kernel sends it SIGTERM when the thread that started it
ends (the driver exited, was killed with ``-9``, or the Ray actor that owns it died). It runs
COMMAND as its child in the same group and, when told to end (that signal, SIGINT, SIGHUP) or
when it finds its parent gone (the death signal is lost if the parent died before ``prctl``
ran: ``getppid`` is checked as well), sends SIGTERM to the whole group, so a server's own
children (vLLM's engine processes) end too, then SIGKILL after a grace period. When COMMAND
ends by itself, it exits with COMMAND's status, and vane decides whether to restart it.

``function PATH``: runs the cloudpickled ``(function, args, kwargs)`` in PATH as
``function(port, *args, **kwargs)``, the port taken from ``PORT`` (the PyTriton pattern).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Any

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 10.0


_prctl: Any = None


def load_prctl() -> None:
    """Load libc's ``prctl`` now, in the parent: ``die_with_parent`` runs between fork and
    exec, where loading a library (which takes locks another thread may hold) can deadlock."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl


def die_with_parent() -> None:
    """Ask the kernel to send SIGTERM to this process when its parent thread ends (Linux; a
    no-op elsewhere, where the ``getppid`` check still applies). Call ``load_prctl`` first."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _end_group(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to every process of this group but this one, SIGKILL to those left after the
    grace period; then this process exits."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's signal reaches us too
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the stragglers, and this process: the last


def watch(parent: int, command: list[str]) -> int:
    load_prctl()
    ending = []
    signal.signal(signal.SIGTERM, lambda *_: ending.append(True))
    signal.signal(signal.SIGINT, lambda *_: ending.append(True))
    signal.signal(signal.SIGHUP, lambda *_: ending.append(True))
    child = subprocess.Popen(command, preexec_fn=die_with_parent)  # noqa: PLW1509 (one thread)
    while True:
        if ending or os.getppid() != parent:
            _end_group(child)
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue


def run_function(path: str) -> None:
    import cloudpickle

    with open(path, "rb") as handle:
        function, args, kwargs = cloudpickle.load(handle)
    function(int(os.environ["PORT"]), *args, **kwargs)


def main(argv: list[str]) -> Any:
    # Run as a script, this file's folder (vane/ai) heads sys.path, where its modules would
    # shadow any top-level module of the same name that a server function imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if argv[:1] == ["watch"] and "--" in argv:
        split = argv.index("--")
        return watch(int(argv[1]), argv[split + 1 :])
    if argv[:1] == ["function"] and len(argv) == 2:
        return run_function(argv[1])
    sys.exit(f"usage: {argv[0]} watch PARENT -- COMMAND... | function PATH")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
