"""Worker processes, started before an action needs them and kept warm between actions.

A subprocess actor's process costs about 0.4 s to start (the interpreter, pyarrow, vane's worker
modules, and pandas, which pyarrow imports on its first conversion of Python values): more than
DuckDB's whole run over 2M rows (bench/RESULTS.md, the overhead row). Two things keep that start
out of an action's time:

- **Started early.** A subprocess step's workers are asked for (``prestart``) as the step is
  built (the local runner's ``check``), and again as an action that will need them begins,
  before its input is opened; the processes start and import what a first batch needs
  (``_worker.warm_up``) while the driver does that work. The UDF is sent to them (and its
  constructor runs in them) when its stage starts, as before. A worker started early waits
  here like an idle one, and ends like one if no action comes for it.
- **Kept warm.** When an action ends gracefully, each of its workers, once its UDF's
  ``teardown()`` has run and the instance is released, waits here for the next action instead of
  exiting, for ``worker_idle_timeout_s`` (``vane.configure``; 0 turns this and the early start
  off: workers then start with their stage and end with their action). The next action
  whose workers would start the same way takes it instead of starting one. Only the process is
  reused, never a UDF instance: a worker gets a new INIT (the UDF, constructed anew) each time.

When a worker may be reused (its *fingerprint*): it was started the same way (``WorkerKey``: the
same interpreter, environment variables, CUDA_VISIBLE_DEVICES and thread counts among them,
working directory, and number of shared-memory slots), the driver's ``sys.path`` is the one its
last UDF was sent with, and none of the files of the modules it imported has changed on disk
since (a module edited between two actions in a notebook is imported afresh, in a new process).
A worker whose UDF changed or removed an environment variable it was started with, or changed
its working directory, does not come back (``_worker.py``), nor one that died, hung, or was
stopped after a failure or a Ctrl-C: those are killed as before. What a reused worker keeps is
what a process keeps: modules and their globals, like the thread backend's process between
actions; environment variables added since its start (libraries add some as they are imported)
are unset before the next UDF comes. A worker that ran a UDF on a GPU is ended, not kept
waiting, once a worker started another way is about to use that GPU (``give_way``): what its
model library cached on the device would hold what the next model needs.

Why 5 s by default: actions that follow each other in a script or a loop over files start
within milliseconds of the last one's end, and a notebook's cells re-run at a person's pace,
where a worker's start (0.4 s) weighs little against the pause. An idle worker holds its
interpreter and imports (about 100 MB with pandas; more with torch, whose model the released
instance no longer holds) and its slots' memory; 5 s bounds how long that outlives the work.

No worker outlives the driver: idle ones are let go at interpreter exit (``atexit``), and every
worker also has the parent-death signal and the end of its request pipe (``_worker.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import IO, Any

from vane.execution.actors import ipc, shm
from vane.execution.idle import IdleRegister
from vane.execution.model_bars import worker_environment
from vane.execution.resources import shares_per_device
from vane.udf.spec import UdfSpec

# How long a used worker taken from the pool may take to answer its PING (it answers at once).
PING_SECONDS = 5.0

_VANE_ROOT = str(Path(__file__).resolve().parents[3])

# -P (Python 3.11+): the working directory is not put first on the worker's sys.path, so a
# `vane` folder there cannot stand in for the vane this driver runs.
_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


def _forward(stream: IO[bytes], target: IO[str], worker: Worker) -> None:
    # Whatever happens to the target, keep reading: a worker whose output pipe fills up blocks
    # on its next print (hazard 2 in ipc.py). The prefix names the actor the worker serves now.
    writable = True
    for raw in iter(stream.readline, b""):
        if writable:
            try:
                target.write(worker.prefix + raw.decode(errors="replace"))
                target.flush()
            except Exception:
                writable = False
    stream.close()


class _Spawner:
    """The one thread that starts worker processes, alive as long as the driver: Linux sends
    the parent-death signal that ends a worker with its driver when the *thread* that forked it
    ends, not the process."""

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


def share_devices(spec: UdfSpec, visible: list[str], gpu_share: int) -> list[str]:
    """The devices of the actor holding GPU share ``gpu_share`` (``Actor.gpu_share``): ``gpus``
    whole devices each, or one device shared with as many others as fit whole on it when
    ``gpus`` is a fraction (``resources.gpus_needed`` counts the same way)."""
    if spec.gpus >= 1:
        whole = math.ceil(spec.gpus)
        return visible[gpu_share * whole : (gpu_share + 1) * whole]
    device = gpu_share // shares_per_device(spec.gpus)
    return visible[device : device + 1]


def worker_env(
    spec: UdfSpec,
    visible_gpus: list[str],
    gpu_share: int,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment the worker of the actor holding GPU share ``gpu_share`` starts with:
    ``environ`` (this process's, by default) and what the worker needs over it."""
    # No model library draws its bars in a worker unless asked (model_bars.py).
    base = os.environ if environ is None else environ
    env = dict(base, PYTHONUNBUFFERED="1", **worker_environment(base))
    # The worker imports the same vane as this process, wherever that one came from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_VANE_ROOT, base.get("PYTHONPATH")) if p)
    if spec.cpus:
        # Math libraries (torch, numpy's BLAS) size their thread pools from these at import:
        # an actor then uses the cores it asked for instead of every core on the machine.
        threads = str(max(1, math.ceil(spec.cpus)))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = threads
    if spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(share_devices(spec, visible_gpus, gpu_share))
    return env


@dataclass(frozen=True)
class WorkerKey:
    """How a worker process was started: two workers with the same key are interchangeable
    until their first UDF."""

    executable: str
    env: tuple[tuple[str, str], ...]
    cwd: str
    slots: int
    slot_limit: int
    linger: bool

    @classmethod
    def of(
        cls, env: dict[str, str], slots: int, slot_limit: int, *, linger: bool = False
    ) -> WorkerKey:
        return cls(
            sys.executable,
            tuple(sorted(env.items())),
            os.getcwd(),
            min(slots, shm.MAX_SLOTS) if shm.AVAILABLE else 0,
            slot_limit,
            linger,
        )

    def devices(self) -> frozenset[str]:
        """The GPUs its worker sees (``CUDA_VISIBLE_DEVICES``; none named: none counted)."""
        visible = dict(self.env).get("CUDA_VISIBLE_DEVICES", "")
        return frozenset(d.strip() for d in visible.split(",") if d.strip())


class Worker:
    """One worker process and the driver's ends of its pipes and slots. An actor uses it for
    one action; then the warm pool may keep it for the next (``Worker.sys_path`` and
    ``Worker.files`` say what its last UDF left in it)."""

    def __init__(self, key: WorkerKey) -> None:
        self.key = key
        self.prefix = "(vane worker) "  # the actor it serves names it (its output's prefix)
        self.slots = shm.Slots.create(key.slots, key.slot_limit)
        self.sys_path: list[str] | None = None  # None: it never had a UDF
        self.files: list[tuple[str, int]] = []  # its modules' files and their mtimes (ns)
        self.idle_since = 0.0
        request_r, request_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            self.process = _SPAWNER.popen(
                [
                    key.executable,
                    *_SAFE_PATH,
                    "-m",
                    "vane.execution.actors._worker",
                    str(request_r),
                    str(result_w),
                    str(os.getpid()),
                    ",".join(str(fd) for fd in self.slots.fds),
                    *(["linger"] if key.linger else []),
                ],
                pass_fds=(request_r, result_w, *self.slots.fds),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(key.env),
                cwd=key.cwd,
                # A Ray actor's worker lingers to run teardown() after Ray kills the actor, and
                # Ray kills a dead worker's whole process group: it needs a group of its own.
                start_new_session=key.linger,
            )
        except BaseException:
            os.close(request_w)
            os.close(result_r)
            self.slots.close()
            raise
        finally:
            os.close(request_r)
            os.close(result_w)
        self.write_fd, self.read_fd = request_w, result_r
        self._closed = False
        outputs = ((self.process.stdout, sys.stdout), (self.process.stderr, sys.stderr))
        for stream, target in outputs:
            assert stream is not None
            threading.Thread(
                target=_forward, args=(stream, target, self), daemon=True, name="vane-forward"
            ).start()

    def reusable(self, sys_path: list[str]) -> bool:
        """Alive, and nothing it imported or was told would differ from a new worker's."""
        if self.process.poll() is not None:
            return False
        if self.sys_path is None:
            return True  # never used: it may still be starting, and fails as a new one would
        if self.sys_path != sys_path:
            return False
        for file, mtime in self.files:
            try:
                if os.stat(file).st_mtime_ns != mtime:
                    return False
            except OSError:
                return False
        return self._answers()

    def _answers(self) -> bool:
        """Whether the process answers a PING, as a used worker waiting for its next UDF does
        at once. A process that was killed while idle may not be reaped yet (its threads still
        exiting, so ``poll`` cannot tell), but its pipe ends before it answers; one that does
        not answer within ``PING_SECONDS`` is not reused either."""
        try:
            ipc.write_frame(self.write_fd, ipc.PING)
            readable, _, _ = select.select([self.read_fd], [], [], PING_SECONDS)
            return bool(readable) and ipc.read_frame(self.read_fd)[0] == ipc.PING
        except (OSError, EOFError):
            return False

    def close(self, *, kill: bool = False) -> None:
        """Let the process go and close this side of its pipes and slots: an idle worker exits
        on the end of its request pipe (its interpreter winding down as after a job, atexit
        handlers run); ``kill`` ends it at once. Only once no thread uses the pipes."""
        if self._closed:
            return
        self._closed = True
        if kill:
            with contextlib.suppress(OSError):
                self.process.kill()
        for fd in (self.write_fd, self.read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.slots.close()
        threading.Thread(target=_reap, args=(self.process,), daemon=True, name="vane-reap").start()


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:  # an atexit handler that never ends
        process.kill()
        process.wait()


@dataclass
class _Entry:
    """A worker waiting in the warm pool, or still starting (``started`` not yet done)."""

    key: WorkerKey
    started: Future[Worker]

    def worker(self) -> Worker | None:
        """The worker, once started; None while it starts or if it failed to."""
        if not self.started.done() or self.started.exception() is not None:
            return None
        return self.started.result()

    def may_serve(self, key: WorkerKey, sys_path: list[str]) -> bool:
        """Whether it is worth taking for a worker started as ``key`` says, to serve a UDF sent
        with ``sys_path`` (``Worker.reusable`` checks the rest once it is taken)."""
        if self.key != key:
            return False
        if not self.started.done():
            return True  # a started-early one, up in a few milliseconds
        worker = self.worker()
        return worker is not None and worker.sys_path in (None, sys_path)


class WarmPool(IdleRegister[_Entry]):
    """Workers waiting for an action: started early (``prestart``), or given back by an action
    that ended. Each is ended after ``worker_idle_timeout_s`` unused (``IdleRegister``), or once
    it died while idle; started-early ones count from their start."""

    def __init__(self) -> None:
        super().__init__("vane-warm")
        self._closed = False

    def take(self, key: WorkerKey, sys_path: list[str]) -> Worker | None:
        """An idle worker started as ``key`` says that may serve a UDF sent with ``sys_path``,
        the most recently idle first (a started-early one still starting is waited for: a few
        milliseconds); None if there is none."""
        while True:
            with self._lock:
                found = next(
                    (e for e in reversed(self._entries) if e.may_serve(key, sys_path)), None
                )
                if found is None:
                    return None
                self._entries.remove(found)
            try:
                worker = found.started.result()
            except Exception:
                continue
            if worker.reusable(sys_path):
                return worker
            worker.close(kill=True)

    def give_way(self, key: WorkerKey) -> None:
        """End the idle workers that ran a UDF on a GPU that a worker started as ``key`` says
        is about to use, started another way (one started the same way may serve another
        actor of the step). A worker that ran a model on a GPU keeps its device's context, and
        the memory its library cached, after the UDF instance is let go: left waiting, it
        would hold what the next UDF's model needs to load."""
        devices = key.devices()
        if not devices:
            return

        def in_the_way(entry: _Entry) -> bool:
            worker = entry.worker()
            return (
                worker is not None
                and worker.sys_path is not None  # (one never used has touched no device)
                and entry.key != key
                and bool(entry.key.devices() & devices)
            )

        self._end(self._take_where(in_the_way))

    def give_back(self, worker: Worker) -> None:
        """``worker``'s action is over and it waits for another: keep it, unless the pool is
        off (then it is let go)."""
        if self.timeout() <= 0 or self._closed:
            worker.close()
            return
        worker.idle_since = time.monotonic()
        started: Future[Worker] = Future()
        started.set_result(worker)
        self._add(_Entry(worker.key, started))

    def prestart(self, key: WorkerKey, count: int) -> None:
        """See that ``count`` workers started as ``key`` says are idle or starting, starting
        the missing ones without waiting for them."""
        with self._lock:
            if self._closed:
                return
            have = sum(1 for e in self._entries if e.key == key)
        for _ in range(count - have):
            entry = _Entry(key, Future())
            self._add(entry)
            threading.Thread(
                target=self._spawn, args=(entry,), daemon=True, name="vane-prestart"
            ).start()

    def _spawn(self, entry: _Entry) -> None:
        try:
            worker = Worker(entry.key)
        except BaseException as exc:  # the action's own start reports what is wrong
            entry.started.set_exception(exc)
            self.wake()  # (the reaper drops it)
            return
        worker.idle_since = time.monotonic()
        entry.started.set_result(worker)
        self.wake()

    def _add(self, entry: _Entry) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._add_locked(entry)
        if closed:
            entry.started.add_done_callback(_close_started)

    def _idle_since(self, entry: _Entry) -> float | None:
        if not entry.started.done():
            return None  # its start notifies
        worker = entry.worker()
        return time.monotonic() if worker is None else worker.idle_since  # (failed: _gone)

    def _gone(self, entry: _Entry) -> bool:
        """A start that failed (nothing to end), or a worker that died while idle."""
        worker = entry.worker()
        return worker is None or worker.process.poll() is not None

    def _end(self, entries: list[_Entry]) -> None:
        for entry in entries:
            worker = entry.worker()
            if worker is not None:
                worker.close()

    def idle_pids(self) -> set[int]:
        """The processes waiting here now."""
        with self._lock:
            workers = [e.worker() for e in self._entries]
        return {w.process.pid for w in workers if w is not None}

    def close(self) -> None:
        """Let every idle worker go (at interpreter exit; one still starting is let go once it
        is up): none outlives the driver's interpreter."""
        with self._lock:
            self._closed = True
            entries, self._entries = self._entries, []
            self._changed.notify()
        for entry in entries:
            entry.started.add_done_callback(_close_started)


def _close_started(started: Future[Worker]) -> None:
    if started.exception() is None:
        started.result().close()


WARM = WarmPool()
atexit.register(WARM.close)
