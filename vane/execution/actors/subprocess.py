"""Subprocess actors: each actor is an ``ActorBody`` in its own OS process (own GIL), started
with the spawn method and built from the cloudpickled UDF (so classes from ``__main__``,
notebooks and test modules work). Batches and results cross as Arrow IPC in shared-memory
slots created for each actor (``shm.py``), handed over by small frames on pipes (``ipc.py``; the
worker's side is ``_worker.py``).

A worker that dies (a crash, ``os._exit``, the OOM killer) or hangs past ``batch_timeout_s``
(it reports HUNG and exits) is lost: ``base.py`` says what becomes of its batches. The driver's
own threads for a worker (a sender and a receiver) report their own failure as the job's
(``ActorPool.fail_internal``), never as the worker's death.

Workers are forked by one long-lived thread: Linux sends the parent-death signal that ends a
worker with its driver when the *thread* that forked it ends, not the process.

What a worker process costs, beyond the thread backend (the bench's overhead workload: a
trivial UDF over 4,096-row batches, Parquet to Parquet, 2 cores; bench/RESULTS.md has the
current figures): its start, paid inside the action, of about 0.4 s: a fresh interpreter
(~40 ms), pyarrow's import (~175 ms) and vane's worker modules before the UDF is constructed,
then pyarrow's import of pandas (~200 ms) on the UDF's first conversion of Python values. Then
per batch: its trip through a slot and the pipes, about 0.4 ms each when batches went one by
one, which is why quick calls travel in units of several batches (``stage.py``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import IO, Any

import pyarrow as pa

from vane.errors import ActorDiedError
from vane.execution.actors import ipc, shm
from vane.execution.actors.base import Actor, ActorPool, Loss, wait_ready
from vane.execution.actors.body import concurrent_batches, settle
from vane.execution.model_bars import worker_environment
from vane.io import file_stores
from vane.udf.runtime import Task
from vane.udf.shipping import pickled_spec
from vane.udf.spec import UdfSpec

_VANE_ROOT = str(Path(__file__).resolve().parents[3])

# A plain UDF's batches sent to a worker process at once: the one it runs and seven queued
# behind it. A batch's trip (the pool's sender thread, the pipe, the worker's reader, and the
# result's way back to the stage) crosses four threads in two processes, and on a busy 2-core
# machine each hand-off can wait for a core: with fewer queued the worker was seen idle, waiting
# for its next batch. On the bench's overhead workload (4,096-row batches, same runs,
# alternating) 4 was 8-13% faster than 2, and 8 another 8-12% faster than 4 at 20M rows. Eight
# is also the number of shared-memory slots (shm.MAX_SLOTS); the cost is up to eight batches
# held per worker, and at the end of a job up to eight queued on one worker.
PLAIN_BATCHES_IN_FLIGHT = 8


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "closed its pipe while still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"was killed by signal {name}"
    return f"exited with code {returncode}"


def _forward(stream: IO[bytes], target: IO[str], prefix: str) -> None:
    # Whatever happens to the target, keep reading: a worker whose output pipe fills up blocks
    # on its next print (hazard 2 in ipc.py).
    writable = True
    for raw in iter(stream.readline, b""):
        if writable:
            try:
                target.write(prefix + raw.decode(errors="replace"))
                target.flush()
            except Exception:
                writable = False
    stream.close()


# -P (Python 3.11+): the working directory is not put first on the worker's sys.path, so a
# `vane` folder there cannot stand in for the vane this driver runs.
_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


class _Spawner:
    """The one thread that starts worker processes, alive as long as the driver."""

    def __init__(self) -> None:
        self._requests: SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]] = SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vane-spawner", daemon=True)
                self._thread.start()
        started: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((args, kwargs, started))
        return started.result()

    def _run(self) -> None:
        while True:
            args, kwargs, started = self._requests.get()
            try:
                started.set_result(subprocess.Popen(args, **kwargs))
            except BaseException as exc:
                started.set_exception(exc)


_SPAWNER = _Spawner()


class SubprocessActor(Actor):
    abandon_note = "; its worker process was ended"

    def __init__(self, pool: SubprocessPool, index: int, slot: int, env: dict[str, str]) -> None:
        super().__init__(pool, index, slot)
        self.label = f"{pool.spec.name} actor {index}"
        self._slots = shm.Slots.create(pool.slots_per_actor, pool.slot_limit)
        self._slot_of: dict[int, int] = {}  # token -> the slot its batch went in
        # The sender and the receiver both touch the slots; the last of them to end closes them.
        self._slot_users = 2
        self._slot_lock = threading.Lock()
        request_r, request_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            self.process = _SPAWNER.popen(
                [
                    sys.executable,
                    *_SAFE_PATH,
                    "-m",
                    "vane.execution.actors._worker",
                    str(request_r),
                    str(result_w),
                    str(os.getpid()),
                    ",".join(str(fd) for fd in self._slots.fds),
                    *(["linger"] if pool.linger else []),
                ],
                pass_fds=(request_r, result_w, *self._slots.fds),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                # A Ray actor's worker lingers to run teardown() after Ray kills the actor, and
                # Ray kills a dead worker's whole process group: it needs a group of its own.
                start_new_session=pool.linger,
            )
        except BaseException:
            os.close(request_w)
            os.close(result_r)
            self._slots.close()
            raise
        finally:
            os.close(request_r)
            os.close(result_w)
        self._write_fd, self._read_fd = request_w, result_r
        prefix = f"({self.label} pid={self.process.pid}) "
        outputs = ((self.process.stdout, sys.stdout), (self.process.stderr, sys.stderr))
        for stream, target in outputs:
            assert stream is not None
            threading.Thread(
                target=_forward, args=(stream, target, prefix), daemon=True, name="vane-forward"
            ).start()
        self._ready: Future[None] = Future()
        self._started = False  # the UDF was constructed: from then on, an exit is a loss
        self._outbox: SimpleQueue[tuple[int, Task] | None] = SimpleQueue()
        self._early = False  # stopped early: the worker drops the batches it has not started
        self._hangs: dict[int, tuple[int, float, str]] = {}  # token -> attempt, seconds, where
        # Set once nothing more will come from the worker: it said STOPPED, or it is gone.
        self._finished = threading.Event()
        threading.Thread(
            target=self._send_loop, args=(pool.init,), daemon=True, name="vane-send"
        ).start()
        threading.Thread(target=self._receive_loop, daemon=True, name="vane-receive").start()

    def wait_ready(self, timeout: float | None) -> None:
        wait_ready(self._ready, timeout)

    def _send(self, token: int, task: Task) -> None:
        self._outbox.put((token, task))

    def _send_loop(self, init: bytes) -> None:
        # This thread owns the write end: it alone closes it, so its number cannot be reused
        # by another actor's pipe while a write here is still possible.
        try:
            ipc.write_frame(self._write_fd, ipc.INIT, init)
            while (item := self._outbox.get()) is not None:
                token, task = item
                slot = self._slots.take()
                if slot is not None:
                    self._slot_of[token] = slot  # before the result can come back
                parts = ipc.batch_parts(token, task, self._slots, slot)
                ipc.write_frame(self._write_fd, ipc.BATCH, *parts)
            if not self._dead:
                ipc.write_frame(self._write_fd, ipc.STOP_EARLY if self._early else ipc.STOP)
        except OSError:
            pass  # the worker is gone; the receiver reports it
        except BaseException as exc:
            self.process.kill()
            self.pool.fail_internal(f"the thread sending batches to {self.label}", exc)
        finally:
            os.close(self._write_fd)
            self._done_with_slots()

    def _receive_loop(self) -> None:
        try:
            if self._handshake():
                self._receive()
        except BaseException as exc:
            self.process.kill()
            self.pool.fail_internal(f"the thread receiving results from {self.label}", exc)
        finally:
            # This thread owns the read end (see _send_loop).
            os.close(self._read_fd)
            try:
                self._ended()
            finally:
                self._finished.set()
                self._done_with_slots()

    def _done_with_slots(self) -> None:
        with self._slot_lock:
            self._slot_users -= 1
            last = self._slot_users == 0
        if last:
            self._slots.close()

    def _free_slot(self, token: int) -> None:
        """The reply to batch ``token`` is in: its slot, if it had one, is the driver's again."""
        slot = self._slot_of.pop(token, None)
        if slot is not None:
            self._slots.give_back(slot)

    def _handshake(self) -> bool:
        try:
            kind, body = ipc.read_frame(self._read_fd)
        except (EOFError, OSError):
            kind, body = b"", memoryview(b"")
        if kind == ipc.READY:
            self._started = settle(self._ready)
            return self._started
        if kind == ipc.FAILED:
            error = ipc.error_from_bytes(ipc.unpack_ids(body)[3])
        else:
            error = ActorDiedError(
                f"the worker process for {self.label} {exit_description(self.process.wait())} "
                "while constructing the UDF"
            )
        settle(self._ready, error)
        return False

    def _receive(self) -> None:
        while True:
            try:
                kind, body = ipc.read_frame(self._read_fd)
            except (EOFError, OSError):
                return
            if kind == ipc.STOPPED:
                self._finished.set()  # its exit (EOF next) is reaped by _ended, on this thread
                continue
            if kind == ipc.REQUESTS:
                self.pool.report_requests(self.index, ipc.requests_from_bytes(body))
                continue
            token, a, b, rest = ipc.unpack_ids(body)
            if kind == ipc.RESULT:
                outcome = ipc.read_outcome(rest, a, self._slots, b)
                self._free_slot(token)
                self._delivered(token, outcome)
            elif kind == ipc.FAILED:
                self._free_slot(token)
                self._delivered(token, ipc.error_from_bytes(rest))
            elif kind == ipc.HUNG:
                seconds, where = json.loads(bytes(rest))
                self._hangs[token] = (a, seconds, where)  # the worker exits next
            else:
                raise ValueError(f"unexpected frame kind {kind!r}")

    def _ended(self) -> None:
        self._outbox.put(None)  # let the sender thread end too
        returncode = self.process.wait()
        if not self._started:
            return  # never joined the pool: wait_ready reports it
        how = f"the worker process (pid {self.process.pid}) {exit_description(returncode)}"
        running = concurrent_batches(self.pool.spec)
        hangs = dict(self._hangs)

        def charge(position: int, token: int) -> Loss | None:
            if token in hangs:
                attempt, seconds, where = hangs[token]
                text = f"the call did not finish within batch_timeout_s={seconds:g} s"
                return Loss(True, text, attempt, where)
            if hangs or position >= running:
                return None  # queued behind the batch that ended the worker: never started
            return Loss(False, how)

        self._lose(charge)

    def stop(self, *, graceful: bool = True, early: bool = False) -> None:
        self.stopping = True
        settle(self._ready, RuntimeError(f"{self.label} was stopped while starting"))
        if not graceful:
            # After a failure nothing queued here matters: end the worker now rather than let
            # it finish batches whose results nobody will read.
            self.process.kill()
        elif early:
            # Nobody will read what the batches not yet sent return: they stay here, and the
            # worker drops those it has not started (STOP_EARLY).
            self._early = True
            with contextlib.suppress(Empty):
                while True:
                    self._outbox.get_nowait()
        self._outbox.put(None)
        # Once the worker has said STOPPED (its batches answered, the UDF's teardown() run), its
        # interpreter winding down is no business of the action's (measured 0.1-0.4 s with
        # pandas loaded): the receiver reaps it. Only a graceful stop waits for that word; this
        # may run on the receiver itself (fail_internal), which must not wait on itself.
        if graceful and self._finished.wait(timeout=30):
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def gpu_slots(spec: UdfSpec, visible: list[str], slot: int) -> list[str]:
    """The devices of the actor holding ``slot``: ``gpus`` whole devices each, or a shared one
    when ``gpus`` is a fraction."""
    start = math.floor(slot * spec.gpus)
    end = max(start + 1, math.ceil((slot + 1) * spec.gpus))
    return visible[start:end]


class SubprocessPool(ActorPool):
    def __init__(
        self,
        spec: UdfSpec,
        schema: pa.Schema,
        step: str,
        visible_gpus: list[str],
        *,
        linger: bool = False,
    ) -> None:
        super().__init__(spec, schema, step)
        if not spec.is_async:
            self.slots_per_actor = PLAIN_BATCHES_IN_FLIGHT
        self._visible_gpus = visible_gpus
        # Workers that end their UDF (teardown) when this process is killed while they are idle
        # (a Ray actor's workers: see _worker.py).
        self.linger = linger
        self.slot_limit = shm.SLOT_LIMIT
        self.init = pickled_spec(
            spec,
            {
                "schema": schema,
                "step": step,
                "sys_path": list(sys.path),
                "slot_limit": self.slot_limit,
                # the credentials a vane.File in an object store opens with there
                "file_stores": file_stores.snapshot(),
            },
        )

    def _start_actor(self, index: int, slot: int) -> Actor:
        # No model library draws its bars in a worker unless asked (model_bars.py).
        env = dict(os.environ, PYTHONUNBUFFERED="1", **worker_environment())
        # The worker imports the same vane as this process, wherever that one came from.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_VANE_ROOT, os.environ.get("PYTHONPATH")) if p
        )
        if self.spec.cpus:
            # Math libraries (torch, numpy's BLAS) size their thread pools from these at import:
            # an actor then uses the cores it asked for instead of every core on the machine.
            threads = str(max(1, math.ceil(self.spec.cpus)))
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[name] = threads
        if self.spec.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_slots(self.spec, self._visible_gpus, slot))
        return SubprocessActor(self, index, slot, env)
