"""Round-trip cost of moving Arrow tables to a subprocess actor and back: pipes vs shared memory.

Run:  .venv/bin/python bench/ipc_transport.py

A parent process starts one child with ``subprocess`` (a fresh interpreter, as
``vane.execution.actors.subprocess`` does) and plays ping-pong: it sends a table, the child
decodes it, re-encodes the same table as its "result" and sends it back, and the parent decodes
that. One round trip therefore includes encoding and decoding on both sides, not just the copy.

Transports:

* ``pipe``: exactly the project's framing -- ``ipc.table_to_buffer`` + ``ipc.write_frame``
  (BATCH, ``pack_ids``) one way, ``ipc.read_frame`` + ``ipc.buffer_to_table`` on arrival; the
  result comes back as a RESULT frame (ids, JSON meta, Arrow IPC) like ``_worker.py`` sends it.
  Pipes are ``os.pipe()`` with the default capacity, passed with ``pass_fds`` like the project.
  (The project sends and receives on two threads; with one message in flight that changes
  nothing, so this loop stays on one thread.)
* ``shm``: the sender measures the stream (``pa.MockOutputStream``), creates a fresh file of
  that size under /dev/shm, writes the Arrow IPC stream straight into its mapping, and sends only
  ``(name, size)`` over the pipe. The receiver maps the file (``pa.memory_map``), unlinks it, and
  opens the stream on the mapped buffer (zero-copy). One file per message, no reuse.
* ``shm-reuse``: as ``shm``, but each side keeps one segment (grown when too small) and both
  sides keep their mappings open, so after the first message no file is created and no page is
  faulted in. This is the best case for shared memory; a pipelined driver would need a ring of
  slots instead of one.

Zero-copy decoding defers page faults to whoever touches the data, so after each round trip the
parent touches one byte per 4 KiB page of every buffer of the result (the child touches all of
it anyway while re-encoding). Bytes per direction = size of the Arrow IPC stream; MB/s counts
both directions (2 x payload / round-trip time). MB = 10**6 bytes.
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from vane.execution.actors import ipc

SHM_DIR = "/dev/shm"
SIZES = [(1_024, 5, 200), (65_536, 2, 12)]  # rows, warm-up round trips, timed round trips
TRANSPORTS = ["pipe", "shm", "shm-reuse"]
DIM = 384
MODEL_ROWS_PER_S = 300.0  # MiniLM embedding throughput on this CPU, for scale

# Control message on the pipe for the shm transports: 8-byte size + segment name.
_CTRL = struct.Struct("<Q")


# ----------------------------------------------------------------------------------------------
# Data


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = pa.array(np.arange(rows, dtype=np.int64))
    # ~60-char strings: random letters/spaces, lengths 50..70.
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      ", dtype=np.uint8)
    lengths = rng.integers(50, 71, size=rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = alphabet[rng.integers(0, alphabet.size, size=int(offsets[-1]))]
    text = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))
    flat = pa.array(rng.standard_normal(rows * DIM, dtype=np.float32))
    emb = pa.FixedSizeListArray.from_arrays(flat, DIM)
    return pa.table({"id": ids, "text": text, "embedding": emb})


def touch(table: pa.Table) -> int:
    """Read one byte per page of every buffer, so lazily mapped pages are really faulted in."""
    acc = 0
    for column in table.columns:
        for chunk in column.chunks:
            for buf in chunk.buffers():  # includes the children's buffers
                if buf is not None and buf.size:
                    acc += int(np.frombuffer(buf, dtype=np.uint8)[::4096].sum())
    return acc


# ----------------------------------------------------------------------------------------------
# Shared-memory helpers (used by both sides)


def stream_size(table: pa.Table) -> int:
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.size()


def write_stream(mm: pa.MemoryMappedFile, table: pa.Table) -> int:
    mm.seek(0)
    with pa.ipc.new_stream(mm, table.schema) as writer:
        writer.write_table(table)
    return mm.tell()


class ShmSender:
    """Writes a table into /dev/shm and returns the control message (size, name)."""

    def __init__(self, prefix: str, reuse: bool) -> None:
        self.prefix, self.reuse = prefix, reuse
        self.count = 0
        self.mm: pa.MemoryMappedFile | None = None
        self.capacity = 0
        self.path = ""

    def send(self, table: pa.Table) -> bytes:
        size = stream_size(table)
        if not self.reuse or self.mm is None or size > self.capacity:
            if self.mm is not None:
                self.mm.close()
                if self.reuse:  # the receiver unlinks fresh files; reused ones are ours
                    os.unlink(self.path)
            self.count += 1
            self.path = f"{SHM_DIR}/{self.prefix}-{self.count}"
            self.capacity = size
            self.mm = pa.create_memory_map(self.path, size)
        written = write_stream(self.mm, table)
        assert written == size, (written, size)
        if not self.reuse:
            self.mm.close()  # the receiver's mapping keeps the pages alive
            self.mm = None
        return _CTRL.pack(size) + os.path.basename(self.path).encode()

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            if self.reuse:
                os.unlink(self.path)


class ShmReceiver:
    def __init__(self, reuse: bool) -> None:
        self.reuse = reuse
        self.name = ""
        self.mm: pa.MemoryMappedFile | None = None

    def receive(self, ctrl: memoryview) -> pa.Table:
        (size,) = _CTRL.unpack(ctrl[: _CTRL.size])
        name = bytes(ctrl[_CTRL.size :]).decode()
        path = f"{SHM_DIR}/{name}"
        if self.reuse:
            if name != self.name:
                self.mm = pa.memory_map(path, "r")
                self.name = name
            mm = self.mm
        else:
            mm = pa.memory_map(path, "r")
            os.unlink(path)  # pages live on while the table's buffers reference the mapping
        assert mm is not None
        mm.seek(0)
        data = mm.read_buffer(size)  # zero-copy slice of the mapping
        return pa.ipc.open_stream(data).read_all()


# ----------------------------------------------------------------------------------------------
# Child


def child(transport: str, read_fd: int, write_fd: int) -> None:
    if transport == "pipe":
        while True:
            kind, body = ipc.read_frame(read_fd)
            if kind == ipc.STOP:
                return
            seq, _offset, rest = ipc.unpack_ids(body)
            table = ipc.buffer_to_table(rest)
            meta = json.dumps([0, 0, None]).encode()
            ipc.write_frame(
                write_fd, ipc.RESULT, ipc.pack_ids(seq, len(meta)), meta, ipc.table_to_buffer(table)
            )
            del table, body, rest
    else:
        reuse = transport == "shm-reuse"
        receiver = ShmReceiver(reuse)
        sender = ShmSender(f"vane-bench-{os.getppid()}-c{os.getpid()}", reuse)
        try:
            while True:
                kind, body = ipc.read_frame(read_fd)
                if kind == ipc.STOP:
                    return
                seq, _offset, rest = ipc.unpack_ids(body)
                table = receiver.receive(rest)
                ctrl = sender.send(table)
                del table
                ipc.write_frame(write_fd, ipc.RESULT, ipc.pack_ids(seq, 0), ctrl)
        finally:
            sender.close()


# ----------------------------------------------------------------------------------------------
# Parent


class Child:
    def __init__(self, transport: str) -> None:
        request_r, request_w = os.pipe()
        result_r, result_w = os.pipe()
        self.process = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                transport,
                str(request_r),
                str(result_w),
            ],
            pass_fds=(request_r, result_w),
            stdin=subprocess.DEVNULL,
        )
        os.close(request_r)
        os.close(result_w)
        self.write_fd, self.read_fd = request_w, result_r
        self.transport = transport
        reuse = transport == "shm-reuse"
        self.sender = ShmSender(f"vane-bench-{os.getpid()}-p", reuse)
        self.receiver = ShmReceiver(reuse)

    def round_trip(self, seq: int, table: pa.Table) -> pa.Table:
        if self.transport == "pipe":
            ipc.write_frame(
                self.write_fd, ipc.BATCH, ipc.pack_ids(seq, 0), ipc.table_to_buffer(table)
            )
            kind, body = ipc.read_frame(self.read_fd)
            got, extra, rest = ipc.unpack_ids(body)
            json.loads(bytes(rest[:extra]))
            result = ipc.buffer_to_table(rest[extra:])
        else:
            ctrl = self.sender.send(table)
            ipc.write_frame(self.write_fd, ipc.BATCH, ipc.pack_ids(seq, 0), ctrl)
            kind, body = ipc.read_frame(self.read_fd)
            got, _extra, rest = ipc.unpack_ids(body)
            result = self.receiver.receive(rest)
        if kind != ipc.RESULT or got != seq:
            raise RuntimeError(f"unexpected reply {kind!r} for seq {got}, expected {seq}")
        touch(result)
        return result

    def close(self) -> None:
        ipc.write_frame(self.write_fd, ipc.STOP)
        self.process.wait(timeout=30)
        os.close(self.write_fd)
        os.close(self.read_fd)
        self.sender.close()


def measure(transport: str, table: pa.Table, warmup: int, rounds: int) -> list[float]:
    child_proc = Child(transport)
    try:
        seq = 0
        result = child_proc.round_trip(seq, table)
        if not result.equals(table):
            raise RuntimeError(f"{transport}: the echoed table differs from the one sent")
        del result
        for _ in range(warmup):
            seq += 1
            child_proc.round_trip(seq, table)
        times = []
        for _ in range(rounds):
            seq += 1
            start = time.perf_counter()
            result = child_proc.round_trip(seq, table)
            times.append(time.perf_counter() - start)
            del result  # release mappings outside the timed region as well as inside
        return times
    finally:
        child_proc.close()


def main() -> None:
    started = time.perf_counter()
    print(f"python {sys.version.split()[0]}, pyarrow {pa.__version__}, {os.cpu_count()} CPUs")
    rows_out = []
    for rows, warmup, rounds in SIZES:
        table = make_table(rows)
        payload = ipc.table_to_buffer(table).size
        per_transport = {}
        for transport in TRANSPORTS:
            times = measure(transport, table, warmup, rounds)
            median = statistics.median(times)
            per_transport[transport] = median
            rows_out.append((rows, payload, transport, rounds, times, median))
        base = per_transport["pipe"]
        rows_out[-len(TRANSPORTS) :] = [(*r, base / r[5]) for r in rows_out[-len(TRANSPORTS) :]]
        del table

    header = (
        f"{'rows':>7} {'MB/dir':>7} {'transport':<10} {'n':>4} {'us/rt (median)':>15} "
        f"{'p10-p90 us':>19} {'MB/s':>8} {'shm/pipe':>8} {'% of model':>10}"
    )
    print()
    print(header)
    print("-" * len(header))
    for rows, payload, transport, n, times, median, ratio in rows_out:
        qs = statistics.quantiles(times, n=10) if len(times) >= 2 else [median] * 9
        mbps = 2 * payload / median / 1e6
        model_s = rows / MODEL_ROWS_PER_S
        print(
            f"{rows:>7} {payload / 1e6:>7.2f} {transport:<10} {n:>4} {median * 1e6:>15,.0f} "
            f"{qs[0] * 1e6:>9,.0f}-{qs[-1] * 1e6:<9,.0f} {mbps:>8,.0f} {ratio:>7.2f}x "
            f"{100 * median / model_s:>9.3f}%"
        )
    print()
    print(
        "MB/s = 2 x payload / median round trip; shm/pipe = pipe time / transport time "
        "(>1: faster than pipe);"
    )
    print(
        f"% of model = round trip / ({MODEL_ROWS_PER_S:.0f} rows/s model time for the batch). "
        f"Total wall time {time.perf_counter() - started:.1f} s."
    )


def cleanup() -> None:
    prefix = f"vane-bench-{os.getpid()}-"
    for name in os.listdir(SHM_DIR):
        if name.startswith(prefix):
            os.unlink(os.path.join(SHM_DIR, name))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        try:
            main()
        finally:
            cleanup()
