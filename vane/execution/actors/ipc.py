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
"""

from __future__ import annotations

import os
import struct

import pyarrow as pa

_HEADER = struct.Struct("<Q")

# Frame kinds.
INIT = b"I"  # driver -> worker: the pickled spec, schema, step label, sys.path
READY = b"R"  # worker -> driver: the UDF was constructed
BATCH = b"B"  # driver -> worker: seq, offset, Arrow IPC
RESULT = b"O"  # worker -> driver: seq, counts, first error, Arrow IPC
FAILED = b"E"  # worker -> driver: seq (or -1 for construction), pickled error payload
STOP = b"S"  # driver -> worker: finish and exit

_IDS = struct.Struct("<qq")


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


def pack_ids(a: int, b: int) -> bytes:
    return _IDS.pack(a, b)


def unpack_ids(body: memoryview) -> tuple[int, int, memoryview]:
    a, b = _IDS.unpack(body[: _IDS.size])
    return a, b, body[_IDS.size :]


def table_to_buffer(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def buffer_to_table(body: memoryview) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
