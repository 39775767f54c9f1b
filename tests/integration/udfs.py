"""UDF classes and functions the map_batches tests run in threads and worker processes. They
live in an importable module so subprocess actors can load them by reference too."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc


class TrivialModel:
    def predict(self, values: list[str]) -> list[str]:
        return [value.upper() for value in values]


def load_model_on_worker() -> TrivialModel:
    return TrivialModel()


class ModelBatch:
    """The seed's example, as written."""

    def __init__(self) -> None:
        self.model = load_model_on_worker()

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch.column("id").to_pylist()
        values = batch.column("input").to_pylist()
        outputs = self.model.predict(values)
        return pa.table({"id": ids, "output": outputs})


class CountingConstructor:
    """Leaves one file per construction in ``directory``, named by process and instance."""

    def __init__(self, directory: str) -> None:
        marker = Path(directory) / f"{os.getpid()}-{id(self)}-{threading.get_ident()}"
        marker.write_text(str(os.getpid()))
        self.tag = marker.name

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table(
            {
                "id": batch["id"],
                "pid": pa.array([os.getpid()] * batch.num_rows),
                "actor": pa.array([self.tag] * batch.num_rows),
            }
        )


class FailOnRow:
    """Raises on any batch that holds the row ``bad``."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.bad in batch["id"].to_pylist():
            raise ValueError(f"cannot score row {self.bad}")
        return pa.table({"id": batch["id"], "score": pc.multiply(batch["id"], 10)})


class FlakyTwice:
    """Fails the first two calls on this actor, then works."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.calls += 1
        if self.calls <= 2:
            raise ConnectionError(f"transient failure {self.calls}")
        return pa.table({"id": batch["id"]})


class DieOnce:
    """Kills its own process the first time it sees row ``row`` (a marker file remembers it
    across processes), then works."""

    def __init__(self, marker: str, row: int) -> None:
        self.marker = Path(marker)
        self.row = row

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.row in batch["id"].to_pylist() and not self.marker.exists():
            self.marker.write_text("died")
            os._exit(3)
        return pa.table({"id": batch["id"], "pid": pa.array([os.getpid()] * batch.num_rows)})


class AlwaysDie:
    def __call__(self, batch: pa.Table) -> pa.Table:
        os._exit(7)


class AsyncSleeper:
    """Records how many calls overlap on this actor. Until ``overlap`` calls have once run at
    the same time, each call waits for them (a minute at most): calls that can overlap then do,
    however slowly they arrive, and calls that cannot give 1 after the wait."""

    def __init__(self, overlap: int = 2) -> None:
        self.overlap = overlap
        self.running = 0
        self.most = 0

    async def __call__(self, batch: pa.Table) -> pa.Table:
        self.running += 1
        self.most = max(self.most, self.running)
        deadline = time.monotonic() + 60
        while self.most < self.overlap and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.running -= 1
        return pa.table({"id": batch["id"], "overlap": pa.array([self.most] * batch.num_rows)})


class RandomDelay:
    def __call__(self, batch: pa.Table) -> pa.Table:
        first = batch["id"][0].as_py()
        time.sleep(0.02 if first % 3 == 0 else 0.0)
        return pa.table({"id": batch["id"]})


class ReportDevices:
    def __init__(self) -> None:
        self.devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"], "devices": [self.devices] * batch.num_rows})


class ReportDevicesTogether(ReportDevices):
    """ReportDevices whose calls answer once ``company`` instances, each seeing other devices,
    have been called (noted in ``folder``; 120 s at most): every actor of a step then answers
    some batch, however late its worker process started."""

    def __init__(self, folder: str, company: int) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.company = company

    def __call__(self, batch: pa.Table) -> pa.Table:
        (self.folder / f"device-{self.devices or 'none'}").touch()
        guard = time.monotonic() + 120
        while len(list(self.folder.glob("device-*"))) < self.company:
            if time.monotonic() > guard:
                raise TimeoutError(f"{self.company} actors were never called together")
            time.sleep(0.02)
        return super().__call__(batch)


class Chatty:
    def __init__(self) -> None:
        print("loading the chatty model", flush=True)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"]})


class SlowThreadTagger:
    def __init__(self) -> None:
        self.tag = f"{os.getpid()}-{id(self)}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        time.sleep(0.05)
        return pa.table({"id": batch["id"], "actor": [self.tag] * batch.num_rows})


def add_one(batch: pa.Table) -> dict[str, pa.Array]:
    return {"id": batch["id"], "next": pc.add(batch["id"], 1)}


def noop(batch: pa.Table) -> pa.Table:
    return batch


def noop_logged(row: dict, log: object = None, *rest: object) -> dict:
    return row


def wrong_type(batch: pa.Table) -> dict[str, object]:
    return {"id": batch["id"], "output": [f"{i}" for i in batch["id"].to_pylist()]}


class ReportThreads:
    def __init__(self) -> None:
        self.threads = os.environ.get("OMP_NUM_THREADS", "")

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"], "threads": [self.threads] * batch.num_rows})


class KillOnce:
    """SIGKILLs its own process on its first batch, as the OOM killer would (once: a marker
    file remembers it across processes)."""

    def __init__(self, marker: str) -> None:
        self.marker = Path(marker)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.marker.exists():
            self.marker.write_text("killed")
            os.kill(os.getpid(), 9)
        return pa.table({"id": batch["id"]})


class BrokenInit:
    def __init__(self) -> None:
        raise FileNotFoundError("model weights not found at /models/x")

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


class ExitOnRow:
    def __call__(self, batch: pa.Table) -> pa.Table:
        if 5 in batch["id"].to_pylist():
            raise SystemExit("bad config")
        return pa.table({"id": batch["id"]})


class SlowSource:
    """Stands in for a slow reader upstream: 100 ms per batch."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        time.sleep(0.1)
        return pa.table({"id": batch["id"]})


# A source that makes its next batch only once the step reading it has answered the last (set
# anew by each test that uses it): the reader's actors never hold two batches at once, however
# busy the machine.
LOCKSTEP = threading.Semaphore(1)


class LockstepSource:
    def __call__(self, batch: pa.Table) -> pa.Table:
        time.sleep(0.01)  # not quick: its calls travel one by one, never in units
        LOCKSTEP.acquire(timeout=60)
        return pa.table({"id": batch["id"]})


class LockstepTagger(SlowThreadTagger):
    """Tags rows with its actor (50 ms a batch), then lets the source make the next batch."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        try:
            return super().__call__(batch)
        finally:
            LOCKSTEP.release()


class CreateFileMidway:
    """Creates ``path`` while the plan runs, as another program might."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.path.exists():
            self.path.write_text("someone else's file")
        return pa.table({"id": batch["id"]})


class ShoutReadsOnlyText:
    """A pass-through UDF: it must receive only the column it reads."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        assert batch.column_names == ["text"], batch.column_names
        return pa.table({"shout": [t.upper() + "!" for t in batch["text"].to_pylist()]})


class ShoutFailsOnBad:
    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch["text"].to_pylist()
        if any("bad" in t for t in texts):
            raise ValueError("bad text")
        return pa.table({"shout": [t.upper() for t in texts]})


def drop_first_row(batch: pa.Table) -> pa.Table:
    return pa.table({"shout": batch["text"].to_pylist()[1:]})


# ---- faults of the actors themselves: hangs, deaths, exceptions the driver cannot load --------

# Set when a test ends, so the threads of hung thread-backend UDFs can end too; a worker
# process has its own copy, never set, so it hangs until it is killed.
RELEASE = threading.Event()


class HangOnRow:
    """Hangs on any batch holding row ``row``; with a ``marker`` path, only the first time
    (the marker remembers it across processes)."""

    def __init__(self, row: int, marker: str | None = None) -> None:
        self.row = row
        self.marker = Path(marker) if marker else None

    def __call__(self, batch: pa.Table) -> pa.Table:
        first = self.marker is None or not self.marker.exists()
        if self.row in batch["id"].to_pylist() and first:
            if self.marker is not None:
                self.marker.write_text(str(os.getpid()))
            RELEASE.wait()
        return pa.table({"id": batch["id"]})


class HangsWhileTheFirstRowsWait:
    """The batch holding row ``row`` leaves ``marker`` and hangs; the batch holding row 0 waits
    for the marker first (a minute at most): once the first rows are answered, the other batch
    is surely running, and hung."""

    def __init__(self, row: int, marker: str) -> None:
        self.row = row
        self.marker = Path(marker)

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        if self.row in ids:
            self.marker.write_text(str(os.getpid()))
            RELEASE.wait()
        if 0 in ids:
            deadline = time.monotonic() + 60
            while not self.marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return pa.table({"id": batch["id"]})


class AsyncHangOnRow:
    def __init__(self, row: int) -> None:
        self.row = row

    async def __call__(self, batch: pa.Table) -> pa.Table:
        if self.row in batch["id"].to_pylist():
            await asyncio.sleep(3600)
        return pa.table({"id": batch["id"]})


class AsyncBlocksLoopOnRow:
    """An async UDF that blocks its own event loop (a plain sleep) on row ``row``."""

    def __init__(self, row: int) -> None:
        self.row = row

    async def __call__(self, batch: pa.Table) -> pa.Table:
        if self.row in batch["id"].to_pylist():
            RELEASE.wait()
        return pa.table({"id": batch["id"]})


class SlowInit:
    """A constructor that never finishes (until RELEASE, in a thread)."""

    def __init__(self, pid_dir: str | None = None) -> None:
        if pid_dir:
            (Path(pid_dir) / str(os.getpid())).write_text("constructing")
        RELEASE.wait()

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


class ExitOnRows:
    """Ends its own process, as a crash would, on any batch holding one of ``rows``."""

    def __init__(self, rows: tuple[int, ...], code: int = 137) -> None:
        self.rows = set(rows)
        self.code = code

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.rows & set(batch["id"].to_pylist()):
            os._exit(self.code)
        return pa.table({"id": batch["id"]})


class DiesFirstThenSlowDevices:
    """Dies on its first batch (once: a marker file), then reports its devices, slowly enough
    that an autoscaling pool grows."""

    def __init__(self, marker: str) -> None:
        self.marker = Path(marker)
        self.devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.marker.exists():
            self.marker.write_text("died")
            os._exit(3)
        time.sleep(0.1)
        return pa.table({"id": batch["id"], "devices": [self.devices] * batch.num_rows})


WORKER_ONLY_MODULE = """
class WorkerOnlyError(ValueError):
    pass
"""


class RaisesWorkerOnlyError:
    """Raises an exception whose class lives in a module only this worker process can import."""

    def __init__(self, directory: str) -> None:
        import sys

        (Path(directory) / "vane_worker_only.py").write_text(WORKER_ONLY_MODULE)
        sys.path.insert(0, directory)
        import vane_worker_only

        self.error = vane_worker_only.WorkerOnlyError

    def __call__(self, batch: pa.Table) -> pa.Table:
        raise self.error(f"rows from {batch['id'][0]} are unreadable")


class TwoArgumentError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return f"[{self.code}] {self.reason}"


class SealedError(Exception):
    """An exception class that refuses to be subclassed."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        raise TypeError("SealedError cannot be subclassed")


class RaisesGiven:
    """Raises the exception its constructor was given (a class and its arguments)."""

    def __init__(self, cls: type[Exception], *args: object) -> None:
        self.cls = cls
        self.args = args

    def __call__(self, batch: pa.Table) -> pa.Table:
        raise self.cls(*self.args)


def uses_asyncio_run(batch: pa.Table) -> pa.Table:
    async def twice() -> list[int]:
        await asyncio.sleep(0)
        return [2 * i for i in batch["id"].to_pylist()]

    return pa.table({"id": batch["id"], "v": asyncio.run(twice())})


class HangAlways:
    """Hangs on every batch, after leaving a file named by its pid in ``pid_dir``."""

    def __init__(self, pid_dir: str | None = None) -> None:
        self.pid_dir = Path(pid_dir) if pid_dir else None

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.pid_dir is not None:
            (self.pid_dir / str(os.getpid())).write_text("hanging")
        RELEASE.wait()
        return pa.table({"id": batch["id"]})


def slot_files() -> dict[int, int]:
    """This process's shared-memory slots (``vane.execution.actors.shm``): inode -> size (a
    mapping holds a descriptor of its own). Each must be an anonymous memory file, never a file
    in /dev/shm."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the descriptor listdir itself used
        if "vane-slot" in target:
            assert target.startswith("/memfd:"), target
            stat = os.fstat(int(name))
            found[stat.st_ino] = stat.st_size
    return found


class EchoWithSlots:
    """Returns its rows with ``text`` repeated ``repeat`` times, and the number and largest size
    of the slots its worker held when it ran the batch."""

    def __init__(self, repeat: int = 1) -> None:
        self.repeat = repeat

    def __call__(self, batch: pa.Table) -> pa.Table:
        slots = slot_files()
        rows = batch.num_rows
        return pa.table(
            {
                "id": batch["id"],
                "text": pc.binary_repeat(batch["text"], self.repeat),
                "slots": pa.array([len(slots)] * rows, pa.int64()),
                "slot_bytes": pa.array([max(slots.values(), default=0)] * rows, pa.int64()),
            }
        )


class KillOnceWithSlots(EchoWithSlots):
    """``EchoWithSlots`` that SIGKILLs its process on its first batch, while that batch's slot is
    the worker's (once: a marker file remembers it across processes)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = Path(marker)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not self.marker.exists():
            self.marker.write_text("killed")
            os.kill(os.getpid(), 9)
        return super().__call__(batch)


class CallSizes:
    """Each row with the size and the first row id of the call that saw it."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"]
        first = ids[0].as_py() if len(ids) else 0
        return pa.table(
            {
                "id": ids,
                "call_rows": pa.array([batch.num_rows] * batch.num_rows, pa.int64()),
                "call_first": pa.array([first] * batch.num_rows, pa.int64()),
            }
        )


class LeavesAHelperThenDies:
    """On a batch holding ``row``: starts a process that outlives the worker, as a UDF that runs
    a tool in the background or forks a helper would, writes its pid into ``pid_dir``, then ends
    its own process. ``how`` is ``"shell"`` (``os.system`` with ``&``) or ``"fork"``."""

    def __init__(self, row: int, how: str, pid_dir: str) -> None:
        self.row, self.how, self.pid_dir = row, how, Path(pid_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.row in batch["id"].to_pylist():
            record = self.pid_dir / f"helper-of-{os.getpid()}"
            if self.how == "shell":
                os.system(f"sleep 600 & echo $! > {record}")
            else:
                pid = os.fork()
                if pid == 0:
                    time.sleep(600)
                    os._exit(0)
                record.write_text(str(pid))
            os._exit(3)
        return pa.table({"id": batch["id"]})


def wait_at_gate(gate: str) -> None:
    """Say the step has begun (a file ``started`` in the folder ``gate``), then wait until the
    test opens the gate (a file ``open``): the test times the wait itself, so it knows a span
    of time the step surely ran through, whatever the machine's speed."""
    folder = Path(gate)
    (folder / "started").touch()
    deadline = time.monotonic() + 120
    while not (folder / "open").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened the gate {gate}")
        time.sleep(0.005)


class Gated:
    """Passes its batches on once the test has opened ``gate`` (``wait_at_gate``)."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def __call__(self, batch: pa.Table) -> pa.Table:
        wait_at_gate(self.gate)
        return batch


class CtrlC:
    """Presses Ctrl-C on the driver (pid ``driver``) from inside a batch, then hangs."""

    def __init__(self, driver: int) -> None:
        self.driver = driver

    def __call__(self, batch: pa.Table) -> pa.Table:
        os.kill(self.driver, signal.SIGINT)
        threading.Event().wait()
        return batch
