"""Where a resumable write keeps the work it has done, so that a rerun pays for nothing twice.

``write_*(..., resume=True)`` keeps, beside a local destination, a folder
(``.<name>.vane-resume``; for a URL, one in this machine's cache: ``store_path``) holding
what each UDF step of the job answered, batch by batch, each under a key of the batch's
input (its place in an input every run gives alike, or a digest of its values:
``vane/execution/resume.py``) and the step's identity. A rerun of the same pipeline reads its
input again (SQL and reading are cheap; models and hosted APIs are not), and every batch whose
answer is kept is taken from there instead of being sent to the function: a job killed at any
instant pays again for the batches that were in flight, never for one whose answer was kept.
The output itself is written by the sink's commit protocol as ever, all at once at the end, so
it holds every row exactly once whatever the number of reruns; once it is committed, the
folder is removed.

The answers of a step are appended to logs, ``<step>/<run>-<pid>-<thread>-<unique>.log``, one
per writer (each thread of each process that keeps answers: locally, the thread that hands a
stage its answers, an actor's or the one reading a worker process's replies; on Ray, each actor's
threads), opened once and never shared, so that appends never interleave and no
lock is taken to keep an answer. One file per answer cost more than a quick function's call
(a creation and a rename, about 1 ms a batch on the benchmark's machine). A log is a sequence
of records, each::

    head:  b"VRL1" | key length (u16) | body length (u64) | CRC-32 of these and the key (u32)
    key:   the batch's key (ASCII): a digest, or ``@<input>:<first row>+<rows>``
    body:  the answer: an Arrow IPC stream, the step's meta in its schema's metadata
    tail:  CRC-32 of the body (u32)

The protocol, and why each step is safe under ``kill -9`` at any instant:

1. ``open``: the folder is made if absent and locked (``flock``) until the job ends, so that a
   second resumable write to the same destination, of this pipeline or another, is refused
   while this one runs (two would write each other's parts and answers). If the folder holds
   a ``pipeline.json`` (what the job was: its plan, each UDF step's code and options, its
   input files), the job must be the same one, or it is refused
   with what changed (``resume="restart"`` drops the saved work first). If not, the folder and
   ``pipeline.json`` are made before the first answer (or the output's first part,
   ``io/parts.py``) is kept, not before: a job that keeps nothing, as a quick one whose output
   is never cut into parts, leaves an empty folder, which ``close`` removes. ``pipeline.json``
   is written to a temporary name and renamed, so it is whole or absent; the answers' logs
   and parts are begun after it.
2. ``put``: the record is appended to the writer's own log with one ``write`` (repeated only
   if the kernel took part of it). A kill during it leaves a torn record at the log's end: a
   short one, or one whose head or body fails its CRC, which a reader skips (with nothing
   after it in that log: its writer is dead). Once the write returns, the answer is whole: a
   killed process's writes are in the kernel's page cache, which outlives it. The stage has an
   answer kept before it hands its rows on, so no answer that reached the output is lost.
   Records are not synced to disk (``fsync``) one by one: that cost more than the rest of a
   quick function's job (8 ms a batch on the benchmark's machine, against 0.3 ms for the
   function). Only the output's correctness needs durability, and the sink's commit gives it
   that, all at once; an answer lost with the machine (a power cut before the kernel wrote it
   out) is paid for again, and one that came back torn (a log whose size reached the disk
   before its data) fails its CRC and is computed again too. A writer whose write failed
   (a full disk) leaves its log: the next answer starts a new one, after the torn record.
3. ``get``: the first ``get`` of a step in a process reads the heads of all of the step's logs,
   each once, from its start up to its first torn record, into an index (digest -> log,
   offset); a log another writer is still appending to ends, for the reader, at what was
   written when it looked. A record's body is read, and its CRC checked, when it is asked
   for; one that fails it reads as missing. An answer is the function's output for that exact
   input (a digest covers every value of every column the function is given, in order; a
   place, the same rows of an input every run gives alike), so taking it is the same as
   calling the function again, minus the cost. An answer kept twice
   (a batch given twice, or computed again after its record failed its CRC) is read from its
   latest whole record. (A folder an earlier vane wrote, one ``.arrow`` file per answer, is
   not read: its batches are computed again.)
4. ``close``: when the job ends, committed or failed, the runner closes the logs its process
   wrote (their answers stay kept), removes the folder if it holds nothing and lets go of
   its lock; a Ray actor's close with its process.
5. ``finish``: after the sink has committed, the folder is removed, under its lock taken
   again (a run that took it between ``close`` and ``finish`` keeps it: the same pipeline's,
   or one that is refused). A kill between the commit and the removal leaves a folder whose
   work is all in the output; a later ``resume=True`` write to the same path with
   ``mode="error"`` fails on the existing output as usual.

Keys find the saved answers again only as long as the input is cut into batches the same
way: the stage cuts its input into ``batch_size`` rows from a stream in a fixed order, so the
same input gives the same batches. A pipeline that reads its input in a different order
(``preserve_order=False`` upstream) simply finds fewer answers: its batches are known by
their digests, never by their places.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pyarrow as pa

from vane.errors import ResumeError
from vane.io.commit import Flock

# write_*(resume=...): keep and use saved work (True), or drop another pipeline's first.
Resume = bool | Literal["restart"]
PIPELINE = "pipeline.json"
log = logging.getLogger("vane")
_META = b"vane.resume"
# A record's head (see the module's text): magic, key length, body length, then a CRC-32 of
# these and the key.
_PREFIX = struct.Struct("<4sHQ")
_HEAD = struct.Struct("<4sHQI")
_MAGIC = b"VRL1"
_TAIL = struct.Struct("<I")  # the body's CRC-32
_LOG = ".log"
# What ``flock`` says on a file system that takes no locks (some network ones).
_NO_LOCKS = (errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)
_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an Arrow IPC stream's end


def cache_root() -> Path:
    """This machine's cache for what vane keeps between runs: ``$VANE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/vane``, else ``~/.cache/vane``."""
    root = os.environ.get("VANE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vane"
    )
    return Path(root)


def store_path(destination: str) -> Path:
    """The folder a resumable write to ``destination`` keeps its work in: beside a local
    destination; for a URL (an object store, any remote filesystem), in this machine's cache
    (``$VANE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vane``, else ``~/.cache/vane``), under a
    digest of the URL, so that the answers are kept where writing them is cheap and safe."""
    if "://" in destination:
        import hashlib

        digest = hashlib.blake2b(destination.rstrip("/").encode(), digest_size=16).hexdigest()
        return cache_root() / "resume" / digest
    target = Path(destination.rstrip("/") or destination)
    return target.parent / f".{target.name}.vane-resume"


@dataclass(frozen=True)
class Saved:
    """An answer kept for one batch: the function's output and what on_error did to it."""

    table: pa.Table
    meta: Mapping[str, Any]


class Record(NamedTuple):
    """Where a kept answer's body lies: its log, its offset there and its length."""

    log: Path
    offset: int
    length: int


def encode(key: str, body: list[bytes | pa.Buffer]) -> list[bytes | pa.Buffer]:
    """A record's parts, in the order they are appended (see the module's text): its head and
    key, the pieces of its body, its tail."""
    raw_key = key.encode("ascii")
    length = sum(len(piece) for piece in body)
    prefix = _PREFIX.pack(_MAGIC, len(raw_key), length) + raw_key
    crc = 0
    for piece in body:
        crc = zlib.crc32(piece, crc)
    head = _HEAD.pack(_MAGIC, len(raw_key), length, zlib.crc32(prefix)) + raw_key
    return [head, *body, _TAIL.pack(crc)]


def answer(table: pa.Table, meta: Mapping[str, Any]) -> list[bytes | pa.Buffer]:
    """An answer as an Arrow IPC stream's pieces: its schema (``meta`` in its metadata), its
    batches, the end of the stream. (Each piece framed by Arrow, without a stream writer, whose
    start and end cost more than the rest for a small batch.)"""
    schema = table.schema.with_metadata({_META: json.dumps(meta).encode()})
    return [schema.serialize(), *(b.serialize() for b in table.to_batches()), _END]


def scan(log: Path) -> Iterator[tuple[str, Record]]:
    """The records of ``log`` whose heads are whole, up to its first torn one (its end, for a
    log whose writer was killed or is still writing). Bodies are checked when read."""
    try:
        with open(log, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            offset = 0
            while offset + _HEAD.size <= size:
                magic, key_length, length, crc = _HEAD.unpack(source.read(_HEAD.size))
                if magic != _MAGIC:
                    return
                raw_key = source.read(key_length)
                prefix = _PREFIX.pack(magic, key_length, length) + raw_key
                if len(raw_key) != key_length or zlib.crc32(prefix) != crc:
                    return
                body = offset + _HEAD.size + key_length
                end = body + length + _TAIL.size
                if end > size:
                    return  # cut short: the last write of a killed writer
                yield raw_key.decode("ascii"), Record(log, body, length)
                source.seek(end)
                offset = end
    except FileNotFoundError:
        return


def read(record: Record) -> bytes | None:
    """A record's body, or None if it fails its CRC (or is gone)."""
    try:
        fd = os.open(record.log, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.pread(fd, record.length + _TAIL.size, record.offset)
    finally:
        os.close(fd)
    if len(data) != record.length + _TAIL.size:
        return None
    (crc,) = _TAIL.unpack_from(data, record.length)
    body = data[: record.length]
    return body if zlib.crc32(body) == crc else None


class _Writer:
    """One thread's log of one step: appended to by that thread alone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self.offset = 0

    def append(self, parts: list[bytes | pa.Buffer]) -> int:
        """Append one record (``encode``'s parts); the offset of its body."""
        body = self.offset + len(parts[0])
        total = sum(len(part) for part in parts)
        written = os.writev(self.fd, parts)
        if written < total:  # the kernel took part of it (a signal, a full disk): the rest
            rest = memoryview(b"".join(memoryview(part) for part in parts))[written:]
            while rest:
                rest = rest[os.write(self.fd, rest) :]
        self.offset += total
        return body

    def close(self) -> None:
        os.close(self.fd)


class ResumeStore:
    """The saved work of one resumable write (see the module's text). Picklable: a copy (in a
    Ray actor) keeps its answers in logs of its own, and reads the logs again for its index."""

    def __init__(self, destination: str, caller: str) -> None:
        self.path = store_path(destination)
        self.caller = caller
        self.run = uuid.uuid4().hex[:12]  # this run's logs' prefix
        self.found = 0  # batches answered from saved work in this run
        # The pipeline.json to write as the first answer or part is kept (``make``); None once
        # the folder holds one.
        self._unmade: str | None = None
        self._setup()

    def _setup(self) -> None:
        self._lock = threading.Lock()  # (taken to build an index or start a log, not to write)
        # step -> digest -> its records, the latest last (one, but for an answer kept twice)
        self._indexes: dict[str, dict[str, list[Record]]] = {}
        self._writers: dict[tuple[str, int, int], _Writer] = {}
        self._held: Flock | None = None  # the folder's lock: the job's

    def __getstate__(self) -> dict[str, Any]:
        state = {"path": self.path, "caller": self.caller, "run": self.run, "found": 0}
        return {**state, "_unmade": self._unmade}  # (a Ray actor may keep the first answer)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def open(self, fingerprint: Mapping[str, Any], *, restart: bool) -> bool:
        """Start or continue the saved work; True if there was some to continue. The store is
        noted as begun (``commit.begun``) before its lock is taken: a Ctrl-C anywhere from here
        to the runner's ``close`` lets the lock go as the write unwinds (``abort``)."""
        from vane.io.commit import begun

        begun(self)
        try:
            taken = self._take()
            if taken is False:
                raise ResumeError(
                    f"{self.caller}(): another resumable write to the same destination is "
                    f"running (its saved work is in {str(self.path)!r}): wait for it to end, or "
                    "write to another destination"
                )
            if taken is None:
                log.warning(
                    "vane: %s(): the file system of %s takes no locks: a second resumable write "
                    "to the same destination would not be refused while this one runs",
                    self.caller,
                    self.path,
                )
            if restart:
                for child in self.path.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            existing = self.path / PIPELINE
            if existing.exists():
                try:
                    saved = json.loads(existing.read_text())
                except (OSError, ValueError) as exc:
                    raise ResumeError(
                        f"{self.caller}(): the saved work in {str(self.path)!r} cannot be read "
                        f"({exc}); pass resume='restart' to start over"
                    ) from exc
                changes = describe_changes(saved, fingerprint)
                if changes:
                    raise ResumeError(
                        f"{self.caller}(): the pipeline is not the one whose work is saved in "
                        f"{str(self.path)!r}: {'; '.join(changes)}. Rerun the same pipeline to "
                        "resume it, or pass resume='restart' to drop the saved work and start over"
                    )
                return True
            self._unmade = json.dumps(fingerprint, indent=1, sort_keys=True)
            return False
        except BaseException:
            self.close()  # (its lock let go: a refused or failed open holds nothing)
            raise

    def make(self) -> None:
        """The folder and its ``pipeline.json``, made before the first answer or part is kept
        (step 1 of the module's text); nothing if they are made."""
        if self._unmade is None:
            return
        with self._lock:
            if self._unmade is None:
                return
            self.path.mkdir(parents=True, exist_ok=True)
            partial = self.path / f"{PIPELINE}.tmp-{uuid.uuid4().hex}"
            partial.write_text(self._unmade)
            os.replace(partial, self.path / PIPELINE)
            self._unmade = None

    def get(self, step: str, digest: str) -> Saved | None:
        table = None
        for record in reversed(self._index(step).get(digest, ())):  # the latest first
            body = read(record)
            if body is None:
                continue  # torn: computed again, and kept again, unless kept twice
            try:
                table = pa.ipc.open_stream(body).read_all()
                break
            except (OSError, ValueError, pa.ArrowInvalid):
                continue  # unreadable (a CRC that matched by chance): as torn
        if table is None:
            return None
        meta = json.loads((table.schema.metadata or {}).get(_META, b"{}"))
        self.found += 1
        return Saved(table.replace_schema_metadata(None), meta)

    def put(self, step: str, digest: str, table: pa.Table, meta: Mapping[str, Any]) -> None:
        parts = encode(digest, answer(table, meta))
        writer_key = (step, os.getpid(), threading.get_ident())
        log = self._writers.get(writer_key) or self._start_log(writer_key)
        try:
            offset = log.append(parts)
        except BaseException:
            # A record torn in the middle of a log hides the ones after it: start a new log.
            del self._writers[writer_key]
            log.close()
            raise
        index = self._indexes.get(step)
        if index is not None:  # (else the index is built from the logs, this one included)
            record = Record(log.path, offset, sum(len(part) for part in parts[1:-1]))
            index.setdefault(digest, []).append(record)

    def count(self, step: str) -> int:
        """How many answers of ``step`` the store holds (whole heads, as ``get`` finds them)."""
        return len(self._index(step))

    def keys(self, step: str) -> Iterator[str]:
        """The keys of ``step``'s answers the store holds (as ``count`` counts them)."""
        return iter(self._index(step))

    def kept(self) -> Iterator[tuple[str, str]]:
        """Every (step, digest) whose answer has a whole head in the store (as a rerun finds
        them; a body that fails its CRC is found, and reads as missing)."""
        if not self.path.is_dir():
            return
        for folder in sorted(p for p in self.path.iterdir() if p.is_dir()):
            for digest in self._index(folder.name):
                yield folder.name, digest

    def close(self) -> None:
        """Close this process's logs (the answers in them stay kept); the folder removed if
        it holds nothing, and its lock let go."""
        with self._lock:
            writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()
        if self._held is not None and self._held.descriptor >= 0:  # (under the lock alone)
            with contextlib.suppress(OSError):  # (not empty: kept work, or not there)
                self.path.rmdir()
        self._let_go()
        from vane.io.commit import seen_through

        seen_through(self)

    def abort(self) -> None:
        """A write interrupted between ``open`` and ``close``: closed (``commit.Abortable``)."""
        self.close()

    def _let_go(self) -> None:
        if self._held is not None:
            self._held.release()  # (a Ctrl-C at its start: the abort's second run releases it)
            self._held = None

    def finish(self) -> None:
        """The output is committed: the saved work has served (and is removed, unless another
        run has taken it since ``close``). Noted as begun again until the lock taken again
        is let go: a Ctrl-C in here leaves it to the write's end to let go (``abort``)."""
        from vane.io.commit import begun

        self.close()
        begun(self)
        try:
            if self._take(make=False) is not False:  # (None: no locks here, as before them)
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            self.close()  # (the folder is gone: it lets go of the lock)

    def _take(self, *, make: bool = True) -> bool | None:
        """Whether the folder's ``flock`` is taken, held in ``_held`` (the folder made
        first if ``make``); False if another run holds it, or, not ``make``, if there is no
        folder; None if its file system takes no locks (a network file system may not)."""
        for _ in range(3):  # (a folder removed as it was taken: a run finishing; take anew)
            if make:
                self.path.mkdir(parents=True, exist_ok=True)
            self._held = Flock()
            try:
                self._held.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                self._let_go()
                if make:
                    continue
                return False
            try:
                taken = self._held.lock(fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                self._let_go()
                if exc.errno in _NO_LOCKS:
                    return None
                raise
            if not taken:
                self._let_go()
                return False
            try:
                same = os.path.samestat(os.fstat(self._held.descriptor), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                return True
            self._let_go()
        return False

    def _index(self, step: str) -> dict[str, list[Record]]:
        index = self._indexes.get(step)
        if index is not None:
            return index
        with self._lock:
            index = self._indexes.get(step)
            if index is None:
                index = {}
                folder = self.path / step
                logs = sorted(folder.glob(f"*{_LOG}"), key=_age) if folder.is_dir() else []
                for log in logs:  # the oldest first
                    for digest, record in scan(log):
                        index.setdefault(digest, []).append(record)
                self._indexes[step] = index
        return index

    def _start_log(self, key: tuple[str, int, int]) -> _Writer:
        step, pid, thread = key
        self.make()
        folder = self.path / step
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.run}-{pid}-{thread}-{uuid.uuid4().hex[:8]}{_LOG}"
        writer = _Writer(folder / name)
        with self._lock:
            self._writers[key] = writer
        return writer


def _age(log: Path) -> tuple[float, str]:
    try:
        return log.stat().st_mtime, log.name
    except FileNotFoundError:
        return 0.0, log.name


def describe_changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two pipelines' fingerprints, in words."""
    changes = []
    saved_steps, steps = dict(saved.get("steps", {})), dict(now.get("steps", {}))
    for name in sorted(saved_steps.keys() | steps.keys()):
        if name not in steps:
            changes.append(f"step `{name}` is gone")
        elif name not in saved_steps:
            changes.append(f"step `{name}` is new")
        elif saved_steps[name] != steps[name]:
            changes.append(f"step `{name}` changed (its function's code or options)")
    saved_inputs, inputs = dict(saved.get("inputs", {})), dict(now.get("inputs", {}))
    added = inputs.keys() - saved_inputs.keys()
    removed = saved_inputs.keys() - inputs.keys()
    replaced = [k for k in inputs.keys() & saved_inputs.keys() if inputs[k] != saved_inputs[k]]
    for what, found in (("new", added), ("gone", removed), ("changed", replaced)):
        if found:
            first = sorted(found)[0]
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            changes.append(f"input file {first!r}{more} {'is' if not more else 'are'} {what}")
    if not changes and saved.get("plan") != now.get("plan"):
        changes.append("its steps differ (compare explain() with the saved plan in pipeline.json)")
    return changes
