"""The rows of a part of a plan that runs on Ray above a UDF step, as vane streams them: blocks
in the object store, in order, each an object ref of an Arrow table, the row it starts at and
its rows (a block Ray Data handed on in part, or the rows of one a limit cut short, is the
same table and fewer rows).

Below its first UDF step a plan runs on Ray Data (reads, SQL over them, tables from the
driver); a UDF step's hosts (``hosts.py``) answer what they get from there, and what reads
their answers reads these blocks: SQL steps over them as one Ray task per block, the driver as
tables, a write as a Ray task per block. Each wait on Ray looks at the action's resource
watch every ``_WAIT_SECONDS`` and gives up with its failure.
"""

from __future__ import annotations

import collections
import functools
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa

from vane._arrow import Rechunker

T = TypeVar("T")

# An object ref of an Arrow table, its first row, its rows.
Block = tuple[Any, int, int]

_WAIT_SECONDS = 0.5
# Ray tasks at once over one stream's blocks (a SQL step's), as many as Ray Data ran.
TASKS_IN_FLIGHT = 4


class Blocks:
    """A stream of blocks that can be read again: each read runs its part of the plan again
    (as a Ray Data dataset's executions do), unless it was ``materialized``."""

    def __init__(self, make: Callable[[], Iterator[Block]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[Block]:
        return self._make()

    def materialized(self) -> Blocks:
        kept = list(self)
        return Blocks(lambda: iter(kept))

    def limited(self, rows: int) -> Blocks:
        """The first ``rows`` rows; what produces them is let go of once they are read."""

        def make() -> Iterator[Block]:
            left = rows
            if left <= 0:
                return
            with closing(iter(self)) as blocks:
                for ref, start, count in blocks:
                    yield ref, start, min(count, left)
                    left -= count
                    if left <= 0:
                        return

        return Blocks(make)


def of_dataset(dataset: Any, pulled: Callable[[Iterator[Any]], Iterator[Any]]) -> Blocks:
    """A Ray Data dataset's blocks as its execution hands them on (``pulled``: through the
    action's note that the driver waits on Ray)."""

    def make() -> Iterator[Block]:
        with closing(pulled(dataset.iter_internal_ref_bundles())) as bundles:
            for bundle in bundles:
                refs, metadata = bundle.block_refs, bundle.metadata
                parts = getattr(bundle, "slices", None) or [None] * len(refs)
                for ref, meta, part in zip(refs, metadata, parts, strict=True):
                    if part is not None:
                        start, rows = part.start_offset, part.num_rows
                    else:
                        start, rows = 0, meta.num_rows
                    if rows is None:  # (every block vane reads says its rows; fetched if not)
                        rows = table_of(fetched(ref, None)).num_rows
                    if rows:
                        yield ref, start, rows

    return Blocks(make)


def mapped(
    blocks: Blocks, fn: Callable[..., pa.Table], args: tuple[Any, ...], watch: Any, cpus: float
) -> Blocks:
    """``fn(table, *args)`` over each block, one Ray task per block, ``TASKS_IN_FLIGHT`` at
    once, the results in order, each handed on as soon as it and those before it are done
    (the blocks come from a ``Feed``, so a block that is slow to come holds back none)."""
    from vane.execution.ray.cluster import ray_module

    def make() -> Iterator[Block]:
        ray = ray_module()
        task = _remote_apply(ray).options(num_cpus=cpus, num_returns=2)
        # Put once, not pickled into each block's task (they share objects: sent as one)
        work = ray.put((fn, args))
        calls: collections.deque[tuple[Any, Any]] = collections.deque()
        done = itertools.count(1)
        feed = Feed(blocks, TASKS_IN_FLIGHT, "vane-ray-block-tasks")
        exhausted = False
        failed = False
        try:
            while True:
                while calls and ray.wait([calls[0][1]], timeout=0)[0]:
                    yield _answer(calls.popleft(), watch, done)
                if exhausted and not calls:
                    return
                if not exhausted and len(calls) < TASKS_IN_FLIGHT:
                    got = feed.take(POLL_SECONDS if calls else _WAIT_SECONDS)
                    if got is END:
                        exhausted = True
                        continue
                    if got is not None:
                        calls.append(task.remote(work, *got))
                        continue
                    if not calls:
                        _given_up(watch)
                        continue
                with watch.pulling():
                    ready = ray.wait([calls[0][1]], timeout=_WAIT_SECONDS)[0]
                if not ready:
                    _given_up(watch)
        except BaseException as exc:
            failed = not isinstance(exc, GeneratorExit)  # (a reader that stopped early)
            raise
        finally:
            feed.close(wait=not failed)

    return Blocks(make)


# What ``Feed.take`` gives once its source has ended.
END: Any = object()
# How long a stream that has work in flight waits for its next input before it looks at that
# work again.
POLL_SECONDS = 0.01
# How long a feed's thread waits to hand on an item before it looks whether to stop.
_PUT_SECONDS = 0.05


class Feed:
    """The items of ``source`` read ahead on a thread of its own, up to ``size`` of them, so
    that a stream can hand on what it has done while its next input is still to come (a
    stream's input is the stream below it, which waits on Ray for each of its own)."""

    def __init__(self, source: Iterable[Any], size: int, name: str) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, size))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source,), name=name, daemon=True)
        self._thread.start()

    def _run(self, source: Iterable[Any]) -> None:
        items = iter(source)
        try:
            for item in items:
                if not self._put(item):
                    return
            self._put(END)
        except BaseException as exc:  # handed to the stream, which raises it
            self._put(_Failed(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # (a stream below ends here, on this thread, when this one stops early)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_PUT_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def take(self, timeout: float) -> Any:
        """The next item, ``END``, or None if none came within ``timeout`` seconds; raises
        what reading the source raised."""
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self, *, wait: bool) -> None:
        """Stop reading; with ``wait``, until the source has been let go of (a stream below
        has ended its steps). After a failure, only briefly: long enough for a thread that
        waits to hand on an item to let go of its source (and Ray Data's execution under it),
        not for one that waits on Ray for its next item; the runner kills what still runs."""
        self._stop.set()
        self._thread.join(timeout=None if wait else _PUT_SECONDS * 4)


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _given_up(watch: Any) -> None:
    if watch.failure is not None:
        raise watch.failure


def _apply(
    work: tuple[Callable[..., pa.Table], tuple[Any, ...]], block: Any, start: int, rows: int
) -> Any:
    fn, args = work
    out = fn(table_of(block).slice(start, rows), *args)
    return out, out.num_rows


@functools.cache
def _remote_apply(ray: Any) -> Any:
    """``_apply`` as a Ray task, made once per process."""
    return ray.remote(_apply)


def _answer(call: tuple[Any, Any], watch: Any, done: Iterator[int]) -> Block:
    answer, rows = call
    count: int = fetched(rows, watch)
    watch.moved("block tasks", next(done))
    return answer, 0, count


def tables(blocks: Blocks, watch: Any, batch_size: int | None) -> Iterator[pa.Table]:
    """The blocks' rows on the driver: each block as a table (``batch_size`` None), or
    tables of ``batch_size`` rows (the last may hold fewer)."""

    def each() -> Iterator[pa.Table]:
        with closing(iter(blocks)) as stream:
            for ref, start, count in stream:
                yield table_of(fetched(ref, watch)).slice(start, count)

    with closing(each()) as read:
        if batch_size is None:
            yield from read
            return
        # (cut with zero-copy slices; a table across blocks holds each block's piece as a
        # chunk of its own, never a copy joined at the seam)
        rechunker = Rechunker(batch for table in read for batch in table.to_batches())
        while not rechunker.exhausted:
            yield pa.Table.from_batches(list(rechunker.take(batch_size)))


def count(blocks: Blocks) -> int:
    with closing(iter(blocks)) as stream:
        return sum(rows for _, _, rows in stream)


@contextmanager
def closing(items: Iterator[T]) -> Iterator[Iterator[T]]:
    """``items``, closed (if it is a generator) however the block ends: the streams below
    end their steps then, on this thread, rather than when Python collects them (an error's
    traceback can keep them for long)."""
    try:
        yield items
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def fetched(ref: Any, watch: Any, *, cancel: bool = False) -> Any:
    """``ref``'s object, waited for as long as the watch allows (None: no watch); with
    ``cancel``, the task that makes it is cancelled when the watch gives up (a task of vane's
    own: no execution of Ray Data's stops it)."""
    from vane.execution.ray.cluster import ray_module

    ray = ray_module()
    if watch is not None:
        with watch.pulling():
            while not ray.wait([ref], timeout=_WAIT_SECONDS, fetch_local=False)[0]:
                if watch.failure is not None:
                    if cancel:
                        ray.cancel(ref, force=True)
                    raise watch.failure
    return ray.get(ref)


def table_of(block: Any) -> pa.Table:
    """A block as the Arrow table it is: every source vane reads on Ray, and every step, gives
    Arrow blocks. Anything else is said, not converted (pandas would change the values of an
    integer column with nulls, for one)."""
    if not isinstance(block, pa.Table):
        raise TypeError(f"vane: a Ray block that is not an Arrow table: {type(block).__name__}")
    return block
