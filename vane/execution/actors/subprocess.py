"""Subprocess actors: each actor is an ``ActorBody`` in its own OS process (own GIL), started
with the spawn method and built from the cloudpickled UDF (so classes from ``__main__``,
notebooks and test modules work). Batches and results cross as Arrow IPC in shared-memory
slots created for each actor (``shm.py``), handed over by small frames on pipes (``ipc.py``; the
worker's side is ``_worker.py``).

A worker that dies (a crash, ``os._exit``, the OOM killer) or hangs past ``batch_timeout_s``
(it reports HUNG and exits) is lost: ``recovery.py`` says what becomes of its batches. The driver's
own threads for a worker (a sender and a receiver) report their own failure as the job's
(``ActorPool.fail_internal``), never as the worker's death.

Workers are started, and kept between actions, by ``warm.py``: an action starts the ones it
will need before it opens its input, and a graceful end leaves them waiting for the next action
(``worker_idle_timeout_s``), each to be given a new UDF.

What a worker process costs, beyond the thread backend (the bench's overhead workload: a
trivial UDF over 4,096-row batches, Parquet to Parquet, 2 cores; bench/RESULTS.md has the
current figures): its start, of about 0.4 s when the action cannot take a warm one: a fresh
interpreter (~40 ms), pyarrow's import (~175 ms), vane's worker modules, and pandas (~200 ms,
which pyarrow imports on its first conversion of Python values), all before the UDF comes and
while the action opens its input. Then per batch: its trip through a slot and the pipes, about
0.4 ms each when batches went one by one, which is why quick calls travel in units of several
batches (``stage.py``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future
from queue import Empty, SimpleQueue

import pyarrow as pa

from vane.errors import ActorDiedError
from vane.execution.actors import ipc, shm
from vane.execution.actors.base import Actor, ActorPool, wait_ready
from vane.execution.actors.body import batches_in_flight, concurrent_batches, settle
from vane.execution.actors.recovery import Loss
from vane.execution.actors.warm import WARM, Worker, WorkerKey, worker_env
from vane.io import file_stores
from vane.udf.runtime import Task
from vane.udf.shipping import pickled_spec
from vane.udf.spec import UdfSpec

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


class SubprocessActor(Actor):
    abandon_note = "; its worker process was ended"

    def __init__(self, pool: SubprocessPool, index: int, gpu_share: int, key: WorkerKey) -> None:
        super().__init__(pool, index, gpu_share)
        self._owner = pool
        self.label = f"{pool.spec.name} actor {index}"
        # (a Ray host's worker, which lingers, is kept by the host's process for the host's
        # next action, as the host itself is by the driver: vane/execution/ray/parked.py)
        worker = WARM.take(key, pool.sys_path)
        WARM.give_way(key)  # (a GPU's idle workers of another start: before this one loads)
        self.worker = worker or Worker(key)
        self.reused = worker is not None
        self.worker.slots.reclaim()  # a kept worker answered (or dropped) every batch it had
        self.process = self.worker.process
        self._slots = self.worker.slots
        self._slot_of: dict[int, int] = {}  # token -> the slot its batch went in
        # The sender and the receiver both use the pipes and slots; the last of them to end
        # gives the worker back to the warm pool, or closes them (``_thread_done``).
        self._users = 2
        self._users_lock = threading.Lock()
        self._write_fd, self._read_fd = self.worker.write_fd, self.worker.read_fd
        self.worker.prefix = f"({self.label} pid={self.process.pid}) "
        self._ready: Future[None] = Future()
        self._started = False  # the UDF was constructed: from then on, an exit is a loss
        self._outbox: SimpleQueue[tuple[int, Task] | None] = SimpleQueue()
        self._early = False  # stopped early: the worker drops the batches it has not started
        self._keep = False  # stopped gracefully with the warm pool on: the worker may stay
        self._kept = False  # it said STOPPED and that it stays: it goes back to the warm pool
        self._hangs: dict[int, tuple[int, float, str]] = {}  # token -> attempt, seconds, where
        # Set once nothing more will come from the worker: it said STOPPED, or it is gone.
        self._finished = threading.Event()
        self._released = threading.Event()  # the worker is back in the warm pool, or let go
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
                stop = ipc.STOP_EARLY if self._early else ipc.STOP
                ipc.write_frame(self._write_fd, stop, *([ipc.KEEP] if self._keep else []))
        except OSError:
            pass  # the worker is gone; the receiver reports it
        except BaseException as exc:
            self.process.kill()
            self.pool.fail_internal(f"the thread sending batches to {self.label}", exc)
        finally:
            self._thread_done()

    def _receive_loop(self) -> None:
        try:
            if self._handshake():
                self._receive()
        except BaseException as exc:
            self.process.kill()
            self.pool.fail_internal(f"the thread receiving results from {self.label}", exc)
        finally:
            try:
                if not self._kept:
                    self._ended()
            finally:
                self._finished.set()
                self._thread_done()

    def _thread_done(self) -> None:
        """One of the actor's two threads has ended; after the second, no write or read on the
        worker's pipes can happen any more (so their numbers cannot be reused under one): it
        goes back to the warm pool if it stays, else its pipes and slots are closed."""
        with self._users_lock:
            self._users -= 1
            last = self._users == 0
        if not last:
            return
        if self._kept:
            WARM.give_back(self.worker)
        else:
            self.worker.close()
        self._released.set()

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
                if body.nbytes:  # it stays for the next action (warm.py)
                    self.worker.sys_path = self._owner.sys_path
                    self.worker.files = [(f, m) for f, m in json.loads(bytes(body))]
                    self._kept = True
                    return
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
        else:
            self._keep = WARM.timeout() > 0
        if graceful and early:
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
        # A worker that stays is back in the warm pool before the action ends, for the next
        # action to find.
        if (
            graceful
            and self._finished.wait(timeout=30)
            and (not self._kept or self._released.wait(timeout=30))
        ):
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class SubprocessPool(ActorPool):
    def __init__(
        self,
        spec: UdfSpec,
        schema: pa.Schema,
        step: str,
        visible_gpus: list[str],
        *,
        linger: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``environ``: what the workers' environment starts from (this process's, by
        default; a Ray host's is the one it started with: ``ray/hosts.py``)."""
        super().__init__(spec, schema, step)
        self._environ = environ
        if not spec.is_async:
            self.batches_per_actor = PLAIN_BATCHES_IN_FLIGHT
        self._visible_gpus = visible_gpus
        # Workers that end their UDF (teardown) when this process is killed while they are idle
        # (a Ray actor's workers: see _worker.py).
        self.linger = linger
        self.slot_limit = shm.SLOT_LIMIT
        self.sys_path = list(sys.path)
        self.init = pickled_spec(
            spec,
            {
                "schema": schema,
                "step": step,
                "sys_path": self.sys_path,
                "slot_limit": self.slot_limit,
                # the credentials a vane.File in an object store opens with there
                "file_stores": file_stores.snapshot(),
            },
        )

    def _start_actor(self, index: int, gpu_share: int) -> Actor:
        key = worker_key(
            self.spec,
            self._visible_gpus,
            gpu_share,
            self.slot_limit,
            linger=self.linger,
            environ=self._environ,
        )
        return SubprocessActor(self, index, gpu_share, key)


def worker_key(
    spec: UdfSpec,
    visible_gpus: list[str],
    gpu_share: int,
    slot_limit: int,
    *,
    linger: bool = False,
    environ: Mapping[str, str] | None = None,
) -> WorkerKey:
    """How the worker of ``spec``'s actor holding GPU share ``gpu_share`` starts (its
    environment from ``environ``, this process's by default); it gets a shared-memory slot for
    each batch it holds at once."""
    slots = PLAIN_BATCHES_IN_FLIGHT if not spec.is_async else batches_in_flight(spec)
    env = worker_env(spec, visible_gpus, gpu_share, environ)
    return WorkerKey.of(env, slots, slot_limit, linger=linger)


def prestart(steps: list[tuple[UdfSpec, list[str]]]) -> None:
    """Start, without waiting for them, the workers that the pools of ``steps`` (each a spec
    and the GPUs visible to it) will start first, unless idle ones would serve (``warm.py``)."""
    needed: Counter[WorkerKey] = Counter()
    for spec, visible in steps:
        for gpu_share in range(spec.min_actors):
            needed[worker_key(spec, visible, gpu_share, shm.SLOT_LIMIT)] += 1
    for key, count in needed.items():
        WARM.prestart(key, count)
