"""The entry point of a subprocess actor:
``python -m vane.execution.actors._worker IN OUT DRIVER [SLOTS]``.

First it imports what a first batch will need (``warm_up``): it may have been started before
the action needs it (``warm.py``). It reads the INIT frame (the cloudpickled UDF spec), hosts an
``ActorBody`` (which constructs the UDF on its own thread), answers READY, then hands each BATCH
to the body and writes back each result, until STOP (or STOP_EARLY: the batches not started are
dropped); once the UDF's teardown() has run and the instance is released it says STOPPED and
exits, or, when STOP said KEEP, waits for the next INIT: a new UDF, constructed anew, for the
driver's next action (``warm.py``; it exits instead if its UDF changed its environment
variables or working directory). Between actions the end of its request pipe is an ordinary
exit. SLOTS are the descriptors of the actor's shared-memory slots, comma separated
(``shm.py``): a batch that came in a slot is copied out of it at once, and its result is written
back into the same slot. A call that overruns ``batch_timeout_s`` cannot be stopped, so the
worker reports it (HUNG) and exits; the driver replaces it.

A worker never outlives its driver. On Linux it asks the kernel to SIGKILL it when the driver
dies (``PR_SET_PDEATHSIG``, which works even while the UDF holds the GIL); everywhere, the main
thread keeps reading requests while the UDF runs on the body's thread, so EOF without STOP (the
driver's end of the pipe closed) ends the process at once, mid-batch. It ignores SIGINT: a
Ctrl-C in a terminal reaches the whole process group, and the driver decides what stops.

A worker that a Ray actor hosts is started with ``linger``. The driver ends such an actor's
step by asking it to (its worker gets STOP and runs ``teardown()``, then, kept, waits for the
actor's next INIT) and kills it after a failure, when Ray kills the worker too (a dead Ray
worker's children are killed). Should the actor die some
other way, leaving its worker, that looks like the worker's driver dying: a lingering worker
asks for no death signal, and on EOF it ends as after STOP_EARLY: the batches not started are
dropped, a running one finishes, and the UDF's ``teardown()`` runs, all within
``LINGER_SECONDS`` (then it exits regardless).

The pipes and slots it inherited are its own: processes the UDF starts (a shell job left
running, a forked helper) must not hold them, or the driver, which learns of the worker's death
from the end of its result pipe, would wait for those processes instead (``keep_to_itself``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import sysconfig
import threading
from typing import Any

import cloudpickle

from vane.execution.actors import ipc
from vane.execution.actors.body import ActorBody, Hang, Result
from vane.execution.actors.shm import Slots
from vane.io import file_stores

# The exit code of a worker that gave up on a hung call (after its HUNG frame).
EXIT_HUNG = 75
_PR_SET_PDEATHSIG = 1
# How long a lingering worker's teardown() may take after its host is gone.
LINGER_SECONDS = 30.0


def follow_driver(driver: int, *, linger: bool = False) -> None:
    """Die with the driver process ``driver`` (unless ``linger``: see the module's text)."""
    if sys.platform.startswith("linux") and not linger:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the pipe's EOF still ends this worker
    if os.getppid() != driver:  # it died before the request above took effect
        os._exit(1)


def keep_to_itself(fds: list[int]) -> None:
    """Keep ``fds`` (the worker's pipes and slots) out of every process the UDF starts.

    They came through ``pass_fds``, which makes them inheritable: a program the UDF runs
    (``os.system``, ``subprocess`` with ``close_fds=False``) would hold them open after the
    worker died, and the driver would see no end of the result pipe, so no death, until that
    program exited. A plain ``os.fork`` copies every descriptor whatever its flags, so the child
    closes them at once; it cannot speak for the worker anyway.
    """
    for fd in fds:
        os.set_inheritable(fd, False)

    def close_in_child() -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    os.register_at_fork(after_in_child=close_in_child)


class _Replies:
    """The worker's side of the result pipe, written from the body's thread."""

    def __init__(self, write_fd: int, slots: Slots | None) -> None:
        self._fd = write_fd
        self._lock = threading.Lock()
        # A lingering worker's host is gone: what the running batch returns goes nowhere.
        self.unread = False
        self._slots = slots
        self._slot_of: dict[int, int] = {}  # token -> the slot its batch came in

    def expect(self, token: int, slot: int) -> None:
        """The batch ``token`` came in ``slot``: its result goes back there."""
        if slot != ipc.INLINE:
            self._slot_of[token] = slot

    def send(self, kind: bytes, *parts: Any) -> None:
        if self.unread:
            return
        try:
            with self._lock:
                ipc.write_frame(self._fd, kind, *parts)
        except OSError:
            os._exit(1)  # the driver is gone

    def deliver(self, token: int, result: Result) -> None:
        slot = self._slot_of.pop(token, None)
        if self.unread:
            return
        if not isinstance(result, BaseException):
            try:
                parts = ipc.outcome_parts(token, result, self._slots, slot)
            except Exception as exc:
                result = exc
            else:
                self.send(ipc.RESULT, *parts)
                return
        self.failed(token, result)

    def failed(self, token: int, error: BaseException) -> None:
        self.send(ipc.FAILED, ipc.pack_ids(token), ipc.error_to_bytes(error))

    def hung(self, hang: Hang) -> None:
        where = json.dumps([hang.seconds, hang.where]).encode()
        self.send(ipc.HUNG, ipc.pack_ids(hang.token, hang.attempt), where)
        os._exit(EXIT_HUNG)

    def answer(self, actor: ActorBody) -> None:
        """READY or the constructor's error, once known. It runs on its own thread, so that the
        main thread watches the pipe while the UDF is constructed."""
        error = actor.ready.exception()
        if error is None:
            self.send(ipc.READY)
        else:
            self.failed(-1, error)


def warm_up() -> None:
    """Import, before the UDF comes, what its first batch will need: pyarrow.compute, and
    pandas, which pyarrow imports on its first conversion of Python values (a list, a scalar
    such as the ``2`` of ``pc.multiply(col, 2)``, a dict of columns) whenever it is installed:
    about 0.2 s, paid here while the driver plans the action and opens its input, rather than
    in the first batch."""
    import pyarrow as pa
    import pyarrow.compute

    pa.array([0])  # pyarrow's own lazy import of pandas, as the first batch would make it


class _Surroundings:
    """What a UDF may change in its process that would make the process unlike a new worker
    started the same way: the environment variables it was started with, and the working
    directory. A worker whose UDF changed or removed one of those variables, or moved, is not
    reused.

    Variables added since are unset instead (``drop_added``): libraries add some as they are
    imported (sentence-transformers adds ``KMP_DUPLICATE_LIB_OK``, ``KMP_INIT_AT_FORK`` and
    ``TORCHINDUCTOR_CACHE_DIR``), and refusing those refused every worker that ran a model."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.cwd = os.getcwd()

    def unchanged(self) -> bool:
        try:
            environ = os.environ
            started = all(environ.get(name) == value for name, value in self.env.items())
            return started and os.getcwd() == self.cwd
        except OSError:  # the working directory is gone
            return False

    def drop_added(self) -> None:
        """Unset the variables added since the start, before the next UDF comes: it starts
        with the environment a new worker would (a UDF's credentials, ``HF_TOKEN``, do not
        reach the next one). A library that added one as it was imported has read it."""
        for name in set(os.environ) - set(self.env):
            os.environ.pop(name, None)


def imported_files() -> list[tuple[str, int]]:
    """The source files of the modules this process imported, with their modification times:
    the driver reuses it only while none has changed (``warm.py``). The standard library is
    left out."""
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep
    files = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and not file.startswith(stdlib):
            with contextlib.suppress(OSError):
                files.append((file, os.stat(file).st_mtime_ns))
    return files


def main(
    read_fd: int, write_fd: int, driver: int, slot_fds: list[int], linger: bool = False
) -> None:
    follow_driver(driver, linger=linger)
    keep_to_itself([read_fd, write_fd, *slot_fds])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warm_up()
    surroundings = _Surroundings()
    slots: Slots | None = None
    served = False
    while True:
        try:
            kind, body = ipc.read_frame(read_fd)
        except EOFError:
            if served:
                return  # let go between actions (the warm pool's timeout): exit as usual
            os._exit(1)
        if kind == ipc.PING:  # the driver checks that this waiting worker is alive
            with contextlib.suppress(OSError):
                ipc.write_frame(write_fd, ipc.PING)
            continue
        assert kind == ipc.INIT, kind
        served = True
        init = cloudpickle.loads(body)
        if slots is None and slot_fds:
            slots = Slots.attach(slot_fds, init["slot_limit"])
        if not serve(
            init,
            read_fd=read_fd,
            write_fd=write_fd,
            slots=slots,
            linger=linger,
            surroundings=surroundings,
        ):
            return


def serve(
    init: dict[str, Any],
    *,
    read_fd: int,
    write_fd: int,
    slots: Slots | None,
    linger: bool,
    surroundings: _Surroundings,
) -> bool:
    """Construct the UDF ``init`` carries and run batches until STOP; whether the driver keeps
    this process for another UDF (STOP carried KEEP, and the UDF left it as it found it)."""
    sys.path[:0] = [p for p in init["sys_path"] if p not in sys.path]
    file_stores.install(init.get("file_stores"))  # (None: the environment's credentials only)
    replies = _Replies(write_fd, slots)
    try:
        actor = ActorBody(
            cloudpickle.loads(init["spec"]),
            init["schema"],
            init["step"],
            deliver=replies.deliver,
            on_hang=replies.hung,
            name="vane-actor",
            report=lambda servers: replies.send(ipc.REQUESTS, ipc.requests_to_bytes(servers)),
        )
    except BaseException as exc:  # the spec does not unpickle here
        replies.failed(-1, exc)
        return False
    threading.Thread(target=replies.answer, args=(actor,), name="vane-ready", daemon=True).start()
    early = keep = False
    while True:
        try:
            kind, body = ipc.read_frame(read_fd)
        except EOFError:
            if linger:
                # The hosting Ray actor was ended: after its last batch, or early (a `limit`
                # met): nobody reads what a batch returns now, but teardown() still runs.
                replies.unread = early = True
                break
            os._exit(1)  # the driver is gone: nobody will read what this batch returns
        if kind in (ipc.STOP, ipc.STOP_EARLY):
            early = kind == ipc.STOP_EARLY
            keep = bytes(body) == ipc.KEEP
            break
        token, slot, task = ipc.read_batch(body, slots)
        replies.expect(token, slot)
        actor.submit(token, task)
    actor.stop(graceful=True, early=early)
    actor.join(LINGER_SECONDS if linger else None)
    # Kept only if its UDF is over: a teardown() still running (past LINGER_SECONDS) or a call
    # given up on would run beside the next UDF, and could answer in its place.
    keep = keep and actor.completed and actor.ready.exception() is None and surroundings.unchanged()
    if keep:
        surroundings.drop_added()
    # The driver need not wait for this interpreter to wind down; a kept worker says what it
    # imported, for the driver to tell whether it may serve the next UDF.
    replies.send(ipc.STOPPED, json.dumps(imported_files()).encode() if keep else b"")
    return keep


if __name__ == "__main__":
    slot_fds = [int(fd) for fd in sys.argv[4].split(",") if fd] if len(sys.argv) > 4 else []
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), slot_fds, sys.argv[5:] == ["linger"])
