"""The output's own files as a resumable write's durable increments: a rerun skips the input
whose rows are in them, and nothing is written twice.

``write_*(folder, resume=True)`` to a local folder on the local runner, without ``errors_to``,
from a plan whose one UDF step is known by its place in its input (``execution/resume.py``:
files read as they were, row by row steps) and whose steps above it keep its rows one for one,
in order (``parts_step``), writes its files as parts of a
bounded size (``PART_BYTES`` of rows, or ``PART_SECONDS`` of writing), each cut where an
answer of the UDF step ends. A closed part is kept in the saved work's folder (``parts/``)
with a record in ``parts.journal`` of the input rows it holds the answers to. A rerun links
the kept parts into its own staging directory, skips their input rows (they are read, never
sent to the function), and writes the rest as new parts after them: the output, committed all
at once at the end as any write is (``commit.py``), holds every row once, in order.

The answer log (``io/resume.py``) still keeps answers as they come, so a kill pays again only
for what was in flight; but where the output's parts bound what a kill loses, an answer whose
keeping would cost more than a small share of the call that made it is not kept
(``KEEP_RATIO``): a quick function's answers were written twice, to the log and to the output,
and the log's write cost as much as the function. A kill then computes again, at most, a
part's worth of a quick function's answers.

The protocol of a part, and why each step is safe under ``kill -9`` at any instant:

1. Written: the part's rows are written to the staging directory and the file closed. A kill
   leaves it in a dead staging directory, which the next write removes.
2. Synced: ``fsync`` of the part, so that a part a record names is on disk before the record
   (a power cut cannot leave a record naming a part whose data was lost).
3. Linked: a hard link of the part into ``parts/`` (the staging directory goes with a dead
   write). A kill leaves a link no record names: the next run removes it. Before the first
   part's link, the saved work's folder is made (``ResumeStore.make``) and the journal begun
   with its head (the sink and the input its parts hold answers to), written to a temporary
   name and renamed: a write whose output is never cut makes neither.
4. Recorded: one append to ``parts.journal`` of a line ``<CRC-32> <JSON>`` (its name, rows,
   bytes, and the input and output rows up to its end). A kill during it leaves a torn last
   line, which fails its CRC and is ignored (its part with it). Once the line is whole, a
   rerun takes the part: it checks each part's size against its record and takes the records
   in order up to the first whose part is missing or whose input does not follow on.

Tests hold a writer between steps with ``VANE_COMMIT_PAUSE`` (``commit._pause``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from vane.io.commit import _pause

if TYPE_CHECKING:
    from vane.io.sinks import FileSink, Part, PartWriter

# A part is closed, at the next answer's end, once this many bytes of rows or seconds of
# writing went into it.
PART_BYTES = 64 * 2**20
PART_SECONDS = 60.0
# Where parts are kept, an answer is kept in the log only if its call took at least this many
# times what keeping an answer costs (so the log adds at most a twentieth to the calls).
KEEP_RATIO = 20.0
# What keeping an answer costs, measured on the benchmark's machine: 14 us to serialize a 64 KB
# answer, 16 us for its CRC-32, 30 us to append it (about 1 GB/s), and some microseconds each.
KEEP_SECONDS = 20e-6
KEEP_BYTES_PER_SECOND = 1e9
JOURNAL = "parts.journal"
FOLDER = "parts"


@dataclass(frozen=True)
class KeptPart:
    """A part a run closed and recorded: it holds the answers to the UDF step's input rows
    from the previous part's ``input_end`` to its own, which are its step's output rows up to
    ``output_end``."""

    name: str
    rows: int
    bytes: int
    input_end: int
    output_end: int
    skipped: int = 0  # the step's rows on_error skipped, and nulled, up to the part's end
    nulled: int = 0


class Mark(NamedTuple):
    """A place where the UDF step's output may be cut: its output and input rows up to there,
    and the rows ``on_error`` skipped and nulled up to there (the step's counts, which a rerun
    that takes the parts before it says again)."""

    output: int
    input: int
    skipped: int = 0
    nulled: int = 0


class Marks:
    """Where the UDF step's output may be cut: after each answer, a ``Mark``. The stage adds one
    before the answer's rows go on, so the writer, which counts the rows it has written, knows
    every place it has passed."""

    def __init__(self, first: Mark) -> None:
        self._lock = threading.Lock()
        self._marks: deque[Mark] = deque([first])

    def add(self, mark: Mark) -> None:
        with self._lock:
            self._marks.append(mark)

    def cut(self, start: int, end: int) -> Mark | None:
        """The latest place after output row ``start`` and at most ``end``, forgetting those
        before it; None if there is none."""
        with self._lock:
            found = None
            while self._marks and self._marks[0].output <= end:
                mark = self._marks.popleft()
                if mark.output > start:
                    found = mark
            if found is not None:
                self._marks.appendleft(found)
            return found


def describe(sink: FileSink) -> str:
    """What decides a part's bytes besides its rows: a part written for another sink is
    never taken."""
    return json.dumps([sink.format, sink.partition_by, sink.rows_per_file], default=str)


def _line(record: dict[str, object]) -> bytes:
    text = json.dumps(record, sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(text), text)


def _records(data: bytes) -> Iterator[dict[str, object]]:
    """A journal's whole lines, up to its first torn one."""
    for line in data.split(b"\n")[:-1]:  # (the last piece: empty, or a torn line)
        crc, _, text = line.partition(b" ")
        try:
            if int(crc, 16) != zlib.crc32(text):
                return
            record = json.loads(text)
        except ValueError:
            return
        yield record


def journal_records(journal: Path) -> list[dict[str, object]]:
    """The records of the journal at ``journal`` (none if it is absent), its head first."""
    try:
        return list(_records(journal.read_bytes()))
    except FileNotFoundError:
        return []


class Parts:
    """The kept parts of one resumable write to a local folder, and the writing of new ones."""

    def __init__(
        self,
        folder: Path,
        sink: FileSink,
        identity: str | None = None,
        make: Callable[[], None] | None = None,
    ) -> None:
        """``folder``: the saved work's (``io/resume.py``); ``identity``: what the parts hold
        answers to (``execution.resume.parts_step``). Parts kept for another identity or sink
        are not taken. ``make``: makes ``folder`` (``ResumeStore.make``), called before the
        first part is kept: a write that keeps none (an output never cut) makes nothing."""
        self.journal = folder / JOURNAL
        self.parts = folder / FOLDER
        self._make = make
        # The journal's head, where there is no journal yet: written as the first part is kept.
        self._unbegun: bytes | None = None
        head: dict[str, object] = {"sink": describe(sink), "input": identity}
        self.token, self.kept = self._load(head)
        last = self.kept[-1] if self.kept else KeptPart("", 0, 0, 0, 0)
        # Where the kept parts end, in the step's rows and counts: where it begins.
        self.done = Mark(last.output_end, last.input_end, last.skipped, last.nulled)
        self.marks = Marks(self.done)

    def _load(self, head: dict[str, object]) -> tuple[str, list[KeptPart]]:
        """The run's part-name token and the parts kept in order. Anything else in ``parts/``
        (a part linked by a run killed before its record) is removed, and the journal is
        rewritten to hold only what is taken: a torn last line left in it would join the
        next record's line, which would then fail its CRC."""
        try:
            data = self.journal.read_bytes()
        except FileNotFoundError:
            token = uuid.uuid4().hex[:12]
            self._unbegun = _line({**head, "token": token})  # (nothing kept: nothing to clear)
            return token, []
        records = list(_records(data))
        self.parts.mkdir(parents=True, exist_ok=True)
        kept: list[KeptPart] = []
        if records and all(records[0].get(k) == v for k, v in head.items()):
            token = str(records[0]["token"])
            for record in records[1:]:
                try:
                    part = KeptPart(**record)  # type: ignore[arg-type]
                except TypeError:
                    break  # (a record of another vane)
                previous = kept[-1].input_end if kept else 0
                try:
                    size = (self.parts / part.name).stat().st_size
                except FileNotFoundError:
                    break
                if size != part.bytes or part.input_end <= previous:
                    break
                kept.append(part)
        else:
            token = uuid.uuid4().hex[:12]
        names = {part.name for part in kept}
        for left in self.parts.iterdir():
            if left.name not in names:
                left.unlink()
        whole = _line({**head, "token": token}) + b"".join(_line(p.__dict__) for p in kept)
        if data != whole:
            temporary = self.journal.with_name(f"{JOURNAL}.tmp-{token}")
            temporary.write_bytes(whole)
            os.replace(temporary, self.journal)
        return token, kept

    def write(self, writer: PartWriter, reader: pa.RecordBatchReader) -> list[Part]:
        """The kept parts linked into the write's staging directory, then ``reader``'s rows
        (the UDF step's output after the kept parts' rows) written as new parts after them."""
        from vane.io.sinks import Part, _opener, _tables, _write_file

        directory = Path(writer.directory)
        written: list[Part] = []
        for part in self.kept:
            _link(self.parts / part.name, directory / part.name)
            written.append(Part(str(directory / part.name), part.rows, part.bytes))
        open_file = _opener(writer.format, None) if writer.format != "json" else None
        assert open_file is not None  # (a JSON sink keeps the answer log only: ``parts_step``)
        stream = _Cutting(iter(reader), self.marks, self.done.output)
        number = len(self.kept)
        while True:
            first = stream.next()
            if first is None and number > 0:
                break  # (nothing after the last cut: no empty part)
            path = directory / f"part-{self.token}-{number:05d}{_suffix(writer)}"
            rows = stream.part(first)
            count = _write_file(path, _tables(writer.format, rows), reader.schema, open_file)
            written.append(Part(str(path), count, path.stat().st_size))
            if stream.cut is None:
                break  # the stream's end: this part is committed with the rest
            self._keep(path, count, stream.cut)
            number += 1
        return written

    def _begin(self) -> None:
        """The saved work's folder, ``parts/`` and the journal with its head, made before the
        first part is linked (a kill before the head is whole leaves no part to take)."""
        if self._unbegun is None:
            return
        if self._make is not None:
            self._make()
        self.parts.mkdir(parents=True, exist_ok=True)
        temporary = self.journal.with_name(f"{JOURNAL}.tmp-{self.token}")
        temporary.write_bytes(self._unbegun)
        os.replace(temporary, self.journal)
        self._unbegun = None
        _pause("parts-begun")

    def _keep(self, path: Path, rows: int, cut: Mark) -> None:
        """Steps 2 to 4 of the protocol (the module's text) for a closed part."""
        self._begin()
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        _pause("part-synced")
        _link(path, self.parts / path.name)
        _pause("part-linked")
        size = path.stat().st_size
        record = KeptPart(path.name, rows, size, cut.input, cut.output, cut.skipped, cut.nulled)
        line = _line(record.__dict__)
        descriptor = os.open(self.journal, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
        _pause("part-recorded")


class _Cutting:
    """The UDF step's output (``batches``) cut into parts, each ended where an answer ends
    once it holds ``PART_BYTES`` of rows or took ``PART_SECONDS``."""

    def __init__(self, batches: Iterator[pa.RecordBatch], marks: Marks, output: int) -> None:
        self.batches = batches
        self.marks = marks
        self.output = output  # the step's output rows so far
        self.carry: list[pa.RecordBatch] = []  # the rows after a cut, for the next part
        self.cut: Mark | None = None  # where the last part ended

    def next(self) -> pa.RecordBatch | None:
        return self.carry.pop() if self.carry else next(self.batches, None)

    def part(self, batch: pa.RecordBatch | None) -> Iterator[pa.RecordBatch]:
        """The rows of one part, from ``batch`` on; ``cut`` says where it ended (None: at the
        stream's end)."""
        start, began, size, per_row = self.output, time.monotonic(), 0, 0.0
        self.cut = None
        while batch is not None:
            if not per_row and batch.num_rows:  # (a batch's nbytes costs a walk of its buffers)
                per_row = batch.nbytes / batch.num_rows
            size += int(batch.num_rows * per_row)
            before = self.output
            self.output += batch.num_rows
            if size >= PART_BYTES or time.monotonic() - began >= PART_SECONDS:
                # (a place in this batch: the rows before it are in the part already)
                self.cut = self.marks.cut(max(start, before - 1), self.output)
                if self.cut is not None:
                    head = self.cut.output - before
                    if head < batch.num_rows:
                        self.carry.append(batch.slice(head))
                    self.output = self.cut.output
                    if head:
                        yield batch.slice(0, head)
                    return
            yield batch
            batch = next(self.batches, None)


def _link(source: Path, target: Path) -> None:
    """``target`` made another name of ``source``; a copy, synced, where the two are on
    different filesystems (a destination that is a link to another disk) or the filesystem
    has no hard links."""
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        partial = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex[:8]}")
        shutil.copyfile(source, partial)
        descriptor = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(partial, target)


def _suffix(writer: PartWriter) -> str:
    from vane.io.sinks import _SUFFIX

    return _SUFFIX[writer.format]


def worth_keeping(call_seconds: float, answer_bytes: float) -> bool:
    """Whether, where parts are kept, a quick call's answer is worth keeping in the log too (an
    async call's, or one that counted requests or tokens, always is: ``Checkpoint.put``): the call
    took at least ``KEEP_RATIO`` times what keeping an answer of its size costs (``KEEP_SECONDS``
    and ``KEEP_BYTES_PER_SECOND``, measured: serializing, its CRC and the append). Only the
    call is timed, and a busy machine only makes a call take longer: an expensive call is never
    taken for a quick one."""
    return call_seconds >= KEEP_RATIO * (KEEP_SECONDS + answer_bytes / KEEP_BYTES_PER_SECOND)
