"""Subprocess actors: each actor is its own OS process (own GIL), started with the spawn method,
built from the cloudpickled UDF (so classes from ``__main__``, notebooks and test modules work).
Batches cross as Arrow IPC over pipes (framing and its hazards: ``ipc.py``).

An actor that dies (a crash, ``os._exit``, the OOM killer) is replaced and its in-flight batches
are sent again, up to ``MAX_DEATHS_PER_BATCH`` times per batch; then the step fails with the
process's exit code or signal.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import IO, Any

import cloudpickle
import pyarrow as pa

from vane.errors import ActorDiedError
from vane.execution.actors import ipc
from vane.execution.actors.base import Actor, ActorPool
from vane.udf.runtime import BatchOutcome, Task
from vane.udf.spec import UdfSpec

MAX_DEATHS_PER_BATCH = 3

log = logging.getLogger("vane")


class RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process, shown as the error's cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def rebuild_error(body: memoryview | bytes) -> BaseException:
    payload = pickle.loads(body)
    error: BaseException = pickle.loads(payload["error"])
    remote = RemoteTraceback(payload["traceback"])
    if payload["cause"] is not None:
        cause: BaseException = pickle.loads(payload["cause"])
        cause.__cause__ = remote
        error.__cause__ = cause
    else:
        error.__cause__ = remote
    return error


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
    for raw in iter(stream.readline, b""):
        target.write(prefix + raw.decode(errors="replace"))
        target.flush()
    stream.close()


class SubprocessActor(Actor):
    def __init__(
        self,
        index: int,
        init: bytes,
        env: dict[str, str],
        label: str,
        on_death: Any,
    ) -> None:
        self.index = index
        self._on_death = on_death
        request_r, request_w = os.pipe()
        result_r, result_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vane.execution.actors._worker", str(request_r), str(result_w)],
            pass_fds=(request_r, result_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        os.close(request_r)
        os.close(result_w)
        self._write_fd, self._read_fd = request_w, result_r
        prefix = f"({label} pid={self.process.pid}) "
        for stream, target in (
            (self.process.stdout, sys.stdout),
            (self.process.stderr, sys.stderr),
        ):
            assert stream is not None
            threading.Thread(
                target=_forward, args=(stream, target, prefix), daemon=True, name="vane-forward"
            ).start()
        self._pending: dict[int, tuple[Task, Future[BatchOutcome]]] = {}
        self._lock = threading.Lock()
        self._outbox: queue.Queue[Task | None] = queue.Queue()
        self._stopping = False
        self._dead = False
        try:
            ipc.write_frame(self._write_fd, ipc.INIT, init)
            kind, body = ipc.read_frame(self._read_fd)
        except (EOFError, OSError):
            kind, body = b"", memoryview(b"")
        if kind != ipc.READY:
            os.close(self._write_fd)
            os.close(self._read_fd)
            if kind == ipc.FAILED:
                _, _, rest = ipc.unpack_ids(body)
                raise rebuild_error(rest)
            returncode = self.process.wait()
            raise ActorDiedError(
                f"the worker process for {label} {exit_description(returncode)} while "
                "constructing the UDF"
            )
        threading.Thread(target=self._send_loop, daemon=True, name="vane-send").start()
        threading.Thread(target=self._receive_loop, daemon=True, name="vane-receive").start()

    @property
    def alive(self) -> bool:
        return not self._dead

    def submit(self, task: Task) -> Future[BatchOutcome]:
        future: Future[BatchOutcome] = Future()
        with self._lock:
            if self._dead:
                # Died after the pool chose it: the pool sends the batch to another actor.
                future.set_exception(_Redispatch())
                return future
            self._pending[task.seq] = (task, future)
        self._outbox.put(task)
        return future

    def _send_loop(self) -> None:
        # This thread owns the write end: it alone closes it, so its number cannot be reused
        # by another actor's pipe while a write here is still possible.
        try:
            while (task := self._outbox.get()) is not None:
                ipc.write_frame(
                    self._write_fd,
                    ipc.BATCH,
                    ipc.pack_ids(task.seq, task.offset),
                    ipc.table_to_buffer(task.table),
                )
            if not self._dead:
                ipc.write_frame(self._write_fd, ipc.STOP)
        except OSError:
            pass  # the worker is gone; the receiver reports it
        finally:
            os.close(self._write_fd)

    def _receive_loop(self) -> None:
        while True:
            try:
                kind, body = ipc.read_frame(self._read_fd)
            except (EOFError, OSError):
                break
            seq, extra, rest = ipc.unpack_ids(body)
            with self._lock:
                _, future = self._pending.pop(seq)
            if kind == ipc.RESULT:
                skipped, nulled, first_error, dropped = json.loads(bytes(rest[:extra]))
                table = ipc.buffer_to_table(rest[extra:])
                future.set_result(BatchOutcome(table, skipped, nulled, first_error, dropped))
            else:
                future.set_exception(rebuild_error(rest))
        # This thread owns the read end (see _send_loop).
        os.close(self._read_fd)
        with self._lock:
            # From here on submit() refuses batches, so none can slip in after the orphans
            # below are collected.
            self._dead = True
            orphans = list(self._pending.values())
            self._pending.clear()
        self._outbox.put(None)  # let the sender thread end too
        returncode = self.process.wait()
        if not self._stopping:
            self._on_death(self, orphans, returncode)

    def stop(self, *, graceful: bool = True) -> None:
        self._stopping = True
        if not graceful:
            # After a failure nothing queued here matters: end the worker now rather than let
            # it finish batches whose results nobody will read.
            self.process.kill()
        self._outbox.put(None)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def gpu_slots(spec: UdfSpec, visible: list[str], slot: int) -> list[str]:
    """The devices of actor ``slot``: ``gpus`` whole devices each, or a shared one when
    ``gpus`` is a fraction."""
    start = math.floor(slot * spec.gpus)
    end = max(start + 1, math.ceil((slot + 1) * spec.gpus))
    return visible[start:end]


class SubprocessPool(ActorPool):
    def __init__(
        self, spec: UdfSpec, schema: pa.Schema, step: str, visible_gpus: list[str]
    ) -> None:
        super().__init__(spec, schema, step)
        self._visible_gpus = visible_gpus
        self._init = cloudpickle.dumps(
            {
                "spec": cloudpickle.dumps(spec),
                "schema": schema,
                "step": step,
                "sys_path": list(sys.path),
            }
        )
        self._slots: dict[int, int] = {}
        self._deaths: dict[int, int] = {}
        self._outer: dict[int, Future[BatchOutcome]] = {}  # by task seq, across re-dispatches

    def _start_actor(self, index: int, slot: int | None = None) -> Actor:
        slot = index if slot is None else slot
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.spec.cpus:
            # Math libraries (torch, numpy's BLAS) size their thread pools from these at import:
            # an actor then uses the cores it asked for instead of every core on the machine.
            threads = str(max(1, math.ceil(self.spec.cpus)))
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[name] = threads
        if self.spec.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_slots(self.spec, self._visible_gpus, slot))
        actor = SubprocessActor(
            index, self._init, env, f"{self.spec.name} actor {index}", self._actor_died
        )
        self._slots[index] = slot
        return actor

    def submit(self, task: Task) -> Future[BatchOutcome]:
        outer: Future[BatchOutcome] = Future()
        self._dispatch(task, outer)
        return outer

    def _dispatch(self, task: Task, outer: Future[BatchOutcome]) -> None:
        with self._lock:
            self._outer[task.seq] = outer

        def relay(done: Future[BatchOutcome]) -> None:
            exc = done.exception()
            if isinstance(exc, _Redispatch) and not outer.done():
                self._dispatch(task, outer)
                return
            if isinstance(exc, _Orphaned) or outer.done():
                return  # its actor died: _actor_died sent the batch elsewhere or failed it
            with self._lock:
                self._outer.pop(task.seq, None)
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(done.result())

        try:
            inner = super().submit(task)
        except BaseException as exc:  # the pool closed or broke meanwhile
            if not outer.done():
                outer.set_exception(exc)
            return
        inner.add_done_callback(relay)

    def _actor_died(
        self,
        actor: SubprocessActor,
        orphans: list[tuple[Task, Future[BatchOutcome]]],
        returncode: int | None,
    ) -> None:
        with self._lock:
            if actor in self.actors:
                self.actors.remove(actor)
            self._load.pop(actor.index, None)
            closed = self._closed
        how = exit_description(returncode)
        retry: list[tuple[Task, Future[BatchOutcome]]] = []
        for task, inner in orphans:
            with self._lock:
                outer = self._outer.pop(task.seq, None)
                deaths = self._deaths.get(task.seq, 0) + 1
                self._deaths[task.seq] = deaths
            if outer is None or outer.done():
                continue
            inner.set_exception(_Orphaned())
            if deaths > MAX_DEATHS_PER_BATCH or closed:
                end = task.offset + task.table.num_rows - 1
                outer.set_exception(
                    ActorDiedError(
                        f"{self.spec.verb} step `{self.step}`: the worker process "
                        f"(pid {actor.process.pid}) {how} while running input rows "
                        f"{task.offset}..{end}, {deaths} times; vane retries a batch "
                        f"{MAX_DEATHS_PER_BATCH} times. Check the worker's output above, and "
                        "its memory use (a process killed by SIGKILL is often out of memory)"
                    )
                )
            else:
                retry.append((task, outer))
        if closed:
            return
        log.warning(
            "%s actor %d (pid %d) %s; starting a replacement and retrying its %d batch(es)",
            self.spec.name,
            actor.index,
            actor.process.pid,
            how,
            len(retry),
        )
        try:
            with self._lock:
                index = self._next_index
                self._next_index += 1
            replacement = self._start_actor(index, self._slots.get(actor.index))
        except BaseException as exc:
            if not self.actors:
                self._break(exc)
            for _, outer in retry:
                if not outer.done():
                    outer.set_exception(exc)
            return
        self._join(replacement)
        for task, outer in retry:
            self._dispatch(task, outer)


class _Orphaned(Exception):
    """Marks an attempt whose actor died; the batch was sent to another actor."""


class _Redispatch(Exception):
    """Marks a batch given to an actor that had just died; it goes to another actor."""
