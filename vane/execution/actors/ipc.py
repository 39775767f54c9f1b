"""Framing between the driver and a subprocess actor: length-prefixed frames over OS pipes.

Pipes were measured against shared memory (bench/ipc_transport.py): a new /dev/shm segment per
batch is slower for 1k-row batches and no faster for 64k-row ones; only a segment kept mapped
wins, by about one copy per side, which is under 0.2% of a model's time per batch. Pipes stay.

Each frame is an 8-byte little-endian length, then one byte of kind, then the body. Arrow
tables travel as Arrow IPC streams, written with ``os.writev`` straight from Arrow's buffer and
read into one preallocated buffer that Arrow then reads without another copy.

Deadlock hazards, and why this layout avoids them:

1. Both directions can hold large frames. If the driver blocks writing a batch into a full pipe
   while the worker blocks writing a result into the other full pipe, neither reads and both
   wait forever. So the driver never reads and writes from the same thread: each actor has a
   sender thread and a receiver thread, and the receiver always drains results.
2. The worker's stdout/stderr are pipes too; if nobody reads them the worker blocks on a
   ``print``. The driver reads them on their own threads for the actor's whole life.
3. A worker that dies mid-frame leaves a short read: ``read_frame`` raises ``EOFError``, the
   receiver treats it as the actor's death, and no thread waits on a frame that never comes.
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
from typing import Any

import cloudpickle
import pyarrow as pa

from vane.udf.failures import builtin_base, format_traceback, stand_in
from vane.udf.runtime import BatchOutcome, Task

_HEADER = struct.Struct("<Q")

# Frame kinds.
INIT = b"I"  # driver -> worker: the pickled spec, schema, step label, sys.path
READY = b"R"  # worker -> driver: the UDF was constructed
BATCH = b"B"  # driver -> worker: token, offset, attempts done, Arrow IPC
RESULT = b"O"  # worker -> driver: token, outcome's counts, Arrow IPC
FAILED = b"E"  # worker -> driver: token (or -1 for construction), the error
HUNG = b"H"  # worker -> driver: token, attempt, where it was stuck; then the worker exits
STOP = b"S"  # driver -> worker: finish the batches sent, then exit

_IDS = struct.Struct("<qqq")


def write_frame(fd: int, kind: bytes, *parts: bytes | memoryview | pa.Buffer) -> None:
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


# ---- what the frames carry -------------------------------------------------------------------


_BATCH_ROWS = struct.Struct("<q")


def batch_parts(token: int, task: Task) -> tuple[bytes, bytes, pa.Buffer]:
    # -1: the offset is the batch's place in the step's input, not in a batch of n rows
    whole = -1 if task.batch_rows is None else task.batch_rows
    return (
        pack_ids(token, task.offset, task.attempts_done),
        _BATCH_ROWS.pack(whole),
        table_to_buffer(task.table),
    )


def read_batch(body: memoryview) -> tuple[int, Task]:
    token, offset, attempts, rest = unpack_ids(body)
    (whole,) = _BATCH_ROWS.unpack(rest[: _BATCH_ROWS.size])
    table = buffer_to_table(rest[_BATCH_ROWS.size :])
    return token, Task(token, offset, table, attempts, None if whole < 0 else whole)


def outcome_parts(token: int, outcome: BatchOutcome) -> tuple[bytes, bytes, pa.Buffer]:
    meta = json.dumps(
        [
            outcome.rows_skipped,
            outcome.rows_nulled,
            outcome.first_error,
            outcome.dropped,
            outcome.poisoned,
            outcome.usage,
        ]
    ).encode()
    return pack_ids(token, len(meta)), meta, table_to_buffer(outcome.table)


def read_outcome(rest: memoryview, meta_size: int) -> BatchOutcome:
    skipped, nulled, first_error, dropped, poisoned, usage = json.loads(bytes(rest[:meta_size]))
    table = buffer_to_table(rest[meta_size:])
    return BatchOutcome(table, skipped, nulled, first_error, dropped, poisoned, usage)


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
