"""Framing between the driver and a subprocess actor: length-prefixed frames over OS pipes,
with the tables themselves in shared memory when they fit (``shm.py``).

Each frame is an 8-byte little-endian length, then one byte of kind, then the body. A frame that
carries a table (BATCH, RESULT) says where the table lies: in one of the actor's shared-memory
slots (its number and size: the frame is a few dozen bytes), or inline, as an Arrow IPC stream
in the rest of the frame, written with ``os.writev`` straight from Arrow's buffer and read into
one preallocated buffer that Arrow then reads without another copy. Which slot a table may use,
and when it is free again, is decided by the driver alone, from the frames it already sends and
receives (``shm.py``): no frame exists only to hand a slot back, so every hazard below, and the
way a death or EOF is noticed, is the same with or without slots.

Why slots: a table sent inline is copied into the pipe and out of it, 64 KiB (the pipe's size)
at a time, each a wake-up of the other side. Measured with this framing, a round trip (batch
there, the same table back) of 4,096 rows of ~40 characters (0.2 MB each way) took 444 us over
pipes and 315 us through slots; of 65,536 rows (3.5 MB) 5.5 ms and 1.1 ms, on a busy 2-core
machine. A new /dev/shm segment per batch is no faster than a pipe (bench/ipc_transport.py):
the slots are created once per actor and stay mapped.

Deadlock hazards, and why this layout avoids them:

1. Both directions can hold large frames. If the driver blocks writing a batch into a full pipe
   while the worker blocks writing a result into the other full pipe, neither reads and both
   wait forever. So the driver never reads and writes from the same thread: each actor has a
   sender thread and a receiver thread, and the receiver always drains results.
2. The worker's stdout/stderr are pipes too; if nobody reads them the worker blocks on a
   ``print``. The driver reads them on their own threads for the actor's whole life.
3. A worker that dies mid-frame leaves a short read: ``read_frame`` raises ``EOFError``, the
   receiver treats it as the actor's death, and no thread waits on a frame that never comes.
   A worker that dies while a slot is its own leaves nothing to wait for either: a slot is
   only memory, and the driver reuses none of a dead actor's (a replacement has its own).
4. Protocol pipes are not the worker's stdin/stdout, so a UDF that prints or reads stdin cannot
   corrupt the framing.
5. A driver that dies leaves the worker's request pipe at EOF. The worker reads requests on its
   main thread while the UDF runs on another, so it notices at once, even mid-batch, and exits.
6. A reply the driver cannot decode (an exception whose class only the worker can import) must
   not end the driver's receiver thread, or the batch's future would never resolve: errors
   travel as their pickle *and* their class's name, builtin base and text, and the driver falls
   back to a stand-in built from those (``vane.udf.failures.stand_in``).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from dataclasses import astuple
from typing import Any, TypeAlias

import cloudpickle
import pyarrow as pa

from vane.execution.actors.shm import Slots
from vane.observe.events import ServerCount
from vane.udf.failures import builtin_base, format_traceback, stand_in
from vane.udf.runtime import BatchOutcome, RowError, Segment, Task

_HEADER = struct.Struct("<Q")

# Frame kinds.
INIT = b"I"  # driver -> worker: the pickled spec, schema, step label, sys.path
READY = b"R"  # worker -> driver: the UDF was constructed
BATCH = b"B"  # driver -> worker: token, offset, attempts done, where the table lies
RESULT = b"O"  # worker -> driver: token, outcome's counts, its failure, where the table lies
FAILED = b"E"  # worker -> driver: token (or -1 for construction), the error
HUNG = b"H"  # worker -> driver: token, attempt, where it was stuck; then the worker exits
STOP = b"S"  # driver -> worker: finish the batches sent, then exit (or with KEEP, wait)
STOP_EARLY = b"X"  # driver -> worker: drop the batches not started, finish the running ones
# worker -> driver: every batch is answered (or dropped) and teardown() ran; from a worker that
# stays for another UDF (warm.py), the files it imported, as JSON
STOPPED = b"D"
# driver -> worker waiting for its next INIT, and back: are you there (warm.py)?
PING = b"P"
# The body of a STOP or STOP_EARLY after which the worker waits for another INIT, not exit.
KEEP = b"K"
# worker -> driver: the UDF's requests per server (vane.observe.requests), as they change
REQUESTS = b"Q"

_IDS = struct.Struct("<qqq")
# Where a table lies: its slot (or INLINE: the rest of the frame) and its size in the slot.
_WHERE = struct.Struct("<qq")
INLINE = -1

Part: TypeAlias = bytes | memoryview | pa.Buffer


def write_frame(fd: int, kind: bytes, *parts: Part) -> None:
    views = [memoryview(kind)] + [memoryview(p) for p in parts]
    total = sum(v.nbytes for v in views)
    pending = [memoryview(_HEADER.pack(total)), *views]
    while pending:
        written = os.writev(fd, pending)
        while pending and written >= pending[0].nbytes:
            written -= pending[0].nbytes
            pending.pop(0)
        if pending and written:
            pending[0] = pending[0][written:]


def _read_exact(fd: int, size: int) -> memoryview:
    # Arrow's allocator skips the zero-filling a bytearray does: measured with bench/
    # ipc_transport.py that halves the round trip of a 100 MB batch.
    view = memoryview(pa.allocate_buffer(size))
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError("the other side of the pipe closed")
        got += n
    return view


def read_frame(fd: int) -> tuple[bytes, memoryview]:
    """The next frame's kind and body; ``EOFError`` if the writer is gone."""
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    body = _read_exact(fd, length)
    return bytes(body[:1]), body[1:]


def requests_to_bytes(servers: tuple[ServerCount, ...]) -> bytes:
    return json.dumps([[c.server, c.in_flight, c.sent, c.retried] for c in servers]).encode()


def requests_from_bytes(body: memoryview) -> tuple[ServerCount, ...]:
    counts = json.loads(bytes(body))
    return tuple(ServerCount(str(s), int(f), int(n), int(r)) for s, f, n, r in counts)


def pack_ids(a: int, b: int = 0, c: int = 0) -> bytes:
    return _IDS.pack(a, b, c)


def unpack_ids(body: memoryview) -> tuple[int, int, int, memoryview]:
    a, b, c = _IDS.unpack(body[: _IDS.size])
    return a, b, c, body[_IDS.size :]


def table_to_buffer(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def buffer_to_table(body: memoryview) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(body)).read_all()


def write_table(table: pa.Table, slots: Slots | None, slot: int | None) -> list[Part]:
    """The frame parts that carry ``table``: where it lies in ``slot``, or, when there is no
    slot or the table does not fit it, the table itself."""
    if slots is not None and slot is not None:
        size = slots.write(slot, table)
        if size is not None:
            return [_WHERE.pack(slot, size)]
    return [_WHERE.pack(INLINE, 0), table_to_buffer(table)]


def read_table(body: memoryview, slots: Slots | None) -> tuple[int, pa.Table]:
    """The slot a table lies in (``INLINE``: none), and the table, copied out of it."""
    slot, size = _WHERE.unpack(body[: _WHERE.size])
    if slot == INLINE:
        return slot, buffer_to_table(body[_WHERE.size :])
    assert slots is not None, "a frame names a slot, and this side has none"
    return slot, slots.read(slot, size)


# ---- what the frames carry -------------------------------------------------------------------


# A batch's ``batch_rows`` and ``call_rows``, -1 for None.
_BATCH_ROWS = struct.Struct("<qq")


def batch_parts(
    token: int, task: Task, slots: Slots | None = None, slot: int | None = None
) -> list[Part]:
    # -1: the offset is the batch's place in the step's input, not in a batch of n rows
    whole = -1 if task.batch_rows is None else task.batch_rows
    call = -1 if task.call_rows is None else task.call_rows
    ids = pack_ids(token, task.offset, task.attempts_done)
    return [ids, _BATCH_ROWS.pack(whole, call), *write_table(task.table, slots, slot)]


def read_batch(body: memoryview, slots: Slots | None = None) -> tuple[int, int, Task]:
    """The batch's token, the slot it came in (``INLINE``: none), and the batch."""
    token, offset, attempts, rest = unpack_ids(body)
    whole, call = _BATCH_ROWS.unpack(rest[: _BATCH_ROWS.size])
    slot, table = read_table(rest[_BATCH_ROWS.size :], slots)
    task = Task(
        token, offset, table, attempts, None if whole < 0 else whole, None if call < 0 else call
    )
    return token, slot, task


def outcome_parts(
    token: int, outcome: BatchOutcome, slots: Slots | None = None, slot: int | None = None
) -> list[Part]:
    meta = json.dumps(
        [
            outcome.rows_skipped,
            outcome.rows_nulled,
            outcome.first_error,
            outcome.dropped,
            outcome.poisoned,
            outcome.usage,
            outcome.seconds,
            outcome.calls,
            [[e.row, e.error, e.attempts] for e in outcome.errors],
            [list(astuple(segment)) for segment in outcome.segments],
        ]
    ).encode()
    # The error that ended a unit part way (BatchOutcome.failure), as FAILED carries one.
    failure = b"" if outcome.failure is None else error_to_bytes(outcome.failure)
    return [
        pack_ids(token, len(meta), len(failure)),
        meta,
        failure,
        *write_table(outcome.table, slots, slot),
    ]


def read_outcome(
    rest: memoryview, meta_size: int, slots: Slots | None = None, failure_size: int = 0
) -> BatchOutcome:
    meta = json.loads(bytes(rest[:meta_size]))
    failure = rest[meta_size : meta_size + failure_size]
    _, table = read_table(rest[meta_size + failure_size :], slots)
    segments = [Segment(*segment) for segment in meta.pop()]
    errors = [RowError(*error) for error in meta.pop()]
    outcome = BatchOutcome(table, *meta)
    outcome.errors = errors
    outcome.segments = segments
    if failure_size:
        outcome.failure = error_from_bytes(failure)
    return outcome


class RemoteTraceback(Exception):
    """The traceback of an error raised in a worker process, shown as the error's cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def _pickled(exc: BaseException) -> bytes | None:
    try:
        data: bytes = cloudpickle.dumps(exc)
        pickle.loads(data)  # some exceptions pickle but do not unpickle
    except Exception:
        return None
    return data


def _described(exc: BaseException) -> tuple[str, str, str, str]:
    cls = type(exc)
    return cls.__module__, cls.__qualname__, builtin_base(cls), str(exc)


def error_to_bytes(error: BaseException) -> bytes:
    """``error`` (to raise in the driver), its ``__cause__`` (the user's exception) when it has
    one, and the formatted traceback of the cause (or of the error itself)."""
    cause = error.__cause__
    payload: dict[str, Any] = {
        "traceback": format_traceback(cause or error),
        "error": (_pickled(error), _described(error)),
        "cause": None if cause is None else (_pickled(cause), _described(cause)),
    }
    return pickle.dumps(payload)


def _rebuilt(pickled: bytes | None, described: tuple[str, str, str, str]) -> BaseException:
    if pickled is not None:
        try:
            exc: BaseException = pickle.loads(pickled)
        except Exception:  # its class cannot be imported here: keep its name and text
            pass
        else:
            return exc
    return stand_in(*described)


def error_from_bytes(body: memoryview | bytes) -> BaseException:
    payload = pickle.loads(body)
    error = _rebuilt(*payload["error"])
    remote = RemoteTraceback(payload["traceback"])
    if payload["cause"] is not None:
        cause = _rebuilt(*payload["cause"])
        cause.__cause__ = remote
        error.__cause__ = cause
    else:
        error.__cause__ = remote
    return error
