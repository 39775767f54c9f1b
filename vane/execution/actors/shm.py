"""Shared-memory slots: where a batch and its result travel between the driver and a subprocess
actor, so that only a small frame crosses the pipe (``ipc.py``).

Each actor has a few *slots*, anonymous memory files (``memfd_create``) that the driver creates
before it starts the worker and the worker inherits (``pass_fds``). Both sides map each slot once
and keep it mapped for the actor's life. A slot has no name, in /dev/shm or anywhere: the kernel
frees it when the last process holding it closes it or exits, so a killed driver or worker
leaks nothing.

Who owns a slot, and when (the driver decides it all, so no message exists only to free one):

1. The driver's sender takes a free slot, writes the batch's Arrow IPC stream into it and sends
   BATCH naming the slot. From then on the slot is the worker's.
2. The worker copies the batch out of the slot as soon as it reads BATCH (the UDF never sees
   shared memory), writes the result's Arrow IPC into the *same* slot, and sends RESULT naming
   it. The slot is the driver's again.
3. The driver's receiver copies the result out and frees the slot. A FAILED reply frees it too;
   a worker that dies takes the slots' only other mappings with it, and the driver closes its
   own when both of its threads for that actor are done.

Anything that does not fit goes inline in the frame, as before slots existed: a batch sent when
every slot is taken (more batches in flight than slots), a table larger than ``SLOT_LIMIT``,
or a slot that cannot grow (no memory for it). A slot starts at ``MIN_SLOT_BYTES`` when first
used and grows, to the next power of two up to ``SLOT_LIMIT``, for a larger table; the writer
grows it (the file is shared, so the other side sees the new size) and the reader maps it again
when a frame names a size beyond its mapping. It never shrinks, so neither side can touch a page
past the file's end.

Copying a table out costs one ``memcpy``; reading Arrow straight from the slot would save it but
would leave the table's buffers pointing into memory the next batch overwrites.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading

import pyarrow as pa

# Slots are grown to a power of two at least this large: a batch of a few thousand short rows
# fits the first one.
MIN_SLOT_BYTES = 1 << 20
# No slot grows past this: a larger table travels inline, rather than keep this much mapped
# (and reserved) for the actor's life. The transport's gain was measured on tables of a few MB.
SLOT_LIMIT = 64 << 20
# At most this many slots per actor; batches beyond them (an async UDF with many calls at once)
# travel inline.
MAX_SLOTS = 8

AVAILABLE = hasattr(os, "memfd_create")


class Slot:
    """One shared-memory file and this process's mapping of it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None

    def _mapping(self, size: int) -> mmap.mmap:
        """The mapping, remapped first if it ends before ``size`` (the other side grew it)."""
        if self._map is None or len(self._map) < size:
            self._unmap()
            self._map = mmap.mmap(self.fd, os.fstat(self.fd).st_size)
        return self._map

    def write(self, table: pa.Table, limit: int) -> int | None:
        """Write ``table`` as an Arrow IPC stream at the slot's start and return its size, or
        None if the slot would have to grow past ``limit`` bytes, or cannot grow (no memory)."""
        size = os.fstat(self.fd).st_size
        if size:  # it usually fits: try before measuring it
            written = self._try_write(table, size)
            if written is not None:
                return written
        needed = _stream_size(table)
        if needed > limit or not self._grow(min(limit, max(MIN_SLOT_BYTES, _power_of_two(needed)))):
            return None
        written = self._try_write(table, os.fstat(self.fd).st_size)
        # None (the grown slot could not be mapped: out of memory) or a surprise: go inline
        return written if written == needed else None

    def _grow(self, capacity: int) -> bool:
        try:
            # Allocated now, so that a machine out of memory is an error here rather than a
            # SIGBUS on the first page written.
            os.posix_fallocate(self.fd, 0, capacity)
        except OSError:
            return False
        return True

    def _try_write(self, table: pa.Table, size: int) -> int | None:
        try:
            return _write_stream(pa.py_buffer(self._mapping(size)), table)
        except OSError:  # "Write out of bounds": the slot is too small
            return None

    def read(self, size: int) -> pa.Buffer:
        """A copy of the slot's first ``size`` bytes, in memory Arrow owns."""
        copy = pa.allocate_buffer(size)
        memoryview(copy).cast("B")[:] = memoryview(self._mapping(size))[:size]
        return copy

    def _unmap(self) -> None:
        if self._map is not None:
            # A view of it still alive (there should be none) keeps it until that view goes.
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None

    def close(self) -> None:
        self._unmap()
        os.close(self.fd)


def _power_of_two(size: int) -> int:
    return 1 << (size - 1).bit_length()


def _stream_size(table: pa.Table) -> int:
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return int(sink.size())


def _write_stream(target: pa.Buffer, table: pa.Table) -> int:
    # Its own function, so that no view of the mapping outlives the write (see Slot._unmap).
    sink = pa.FixedSizeBufferWriter(target)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return int(sink.tell())


class Slots:
    """An actor's slots, by number. The driver creates them and hands them out; the worker
    attaches to the same files by descriptor. Tables larger than ``limit`` are not written."""

    def __init__(self, slots: list[Slot], limit: int) -> None:
        self._slots = slots
        self.limit = limit
        self._free = list(range(len(slots)))
        self._lock = threading.Lock()

    @classmethod
    def create(cls, count: int, limit: int) -> Slots:
        count = min(count, MAX_SLOTS) if AVAILABLE else 0
        slots: list[Slot] = []
        try:
            for number in range(count):
                slots.append(Slot(os.memfd_create(f"vane-slot-{number}")))
        except BaseException:
            for slot in slots:
                slot.close()
            raise
        return cls(slots, limit)

    @classmethod
    def attach(cls, fds: list[int], limit: int) -> Slots:
        return cls([Slot(fd) for fd in fds], limit)

    @property
    def fds(self) -> list[int]:
        return [slot.fd for slot in self._slots]

    def take(self) -> int | None:
        """A free slot's number, now owned by the caller; None if every slot is taken."""
        with self._lock:
            return self._free.pop() if self._free else None

    def reclaim(self) -> None:
        """Every slot is free again: the other side has given up all of them (a worker that
        said STOPPED: the batches it dropped never came back to free theirs)."""
        with self._lock:
            self._free = list(range(len(self._slots)))

    def give_back(self, number: int) -> None:
        with self._lock:
            self._free.append(number)

    def write(self, number: int, table: pa.Table) -> int | None:
        """Write ``table`` into slot ``number`` and return its size; None if it does not fit."""
        return self._slots[number].write(table, self.limit)

    def read(self, number: int, size: int) -> pa.Table:
        """The table the other side wrote into slot ``number``, copied out of it."""
        return pa.ipc.open_stream(self._slots[number].read(size)).read_all()

    def close(self) -> None:
        with self._lock:
            slots, self._slots, self._free = self._slots, [], []
        for slot in slots:
            slot.close()
