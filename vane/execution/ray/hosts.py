"""A UDF step's actors on Ray, started, fed and ended by vane rather than by Ray Data.

Ray Data builds a new actor pool for every execution. Its actor's process must import Ray Data
before it can unpickle the actor (1.3 s of CPU here) and, with a runtime environment of its
own, cannot be one of the worker processes Ray keeps started: a warm Ray action's actor took
about 2.8 s to answer its first call, most of a 4 s action. A plain Ray actor whose module
imports only what the step runs (``RayHost``, around the same ``RayUdf`` body) answers sooner,
and a batch sent to it is one actor call.

``StepHosts`` is the step on the driver: it starts the step's minimum of hosts (taking those
an earlier action kept, ``parked.py``, before starting new ones), cuts the
blocks that reach it into batches of the step's size (across blocks, as Ray Data's
``map_batches`` does), sends each batch to the least busy host that is up, adds hosts up to
the step's maximum while batches wait and the cluster has room for one, and hands on the
answers in the order of their input, as blocks in the object store. At the end each host runs
the UDF's ``teardown()``, waited for, and is kept for the next action (or exits when keeping
is off); an action that stops early (a limit met, a stream closed) ends its hosts the same
way, their unstarted batches dropped. A failed step's hosts are killed.

A host is a Ray actor with unlimited restarts and call retries: lost with its node, it is built
again and its calls sent again, as Ray Data's were (the first call opens it again). A batch the
UDF fails is not sent again (Ray retries an actor call only when the actor died); a UDF whose
constructor fails keeps its host up, and the host answers every call, and the check that it is
up, with that error.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vane.execution.actors.ipc import error_to_bytes
from vane.execution.ray.actor import RayUdf, RemoteFailure
from vane.execution.ray.parked import PARKED, HostKey
from vane.execution.ray.stream import END, POLL_SECONDS, Block, Feed, closing, table_of

# How long a wait on the hosts lasts before it looks again at the resource watch.
_WAIT_SECONDS = 0.5
# How often a step whose hosts are all busy may ask the cluster whether one more would fit.
_GROW_SECONDS = 0.5

# (an input block's place among a batch's blocks, first row, rows)
Piece = tuple[int, int, int]


class RayHost:
    """One host, inside its Ray actor: a ``RayUdf`` built from the step's arguments, for one
    action at a time (``parked.py``: a host may serve the next action's step too).

    The actor is created without arguments, and ``open`` gives it a step's: ``holder``, a list
    holding the object ref of the step's ``(args, kwargs, environment, idle seconds)``, and
    ``token``, the step's own name for them. Every call carries both: a host that Ray restarted
    (its node lost) has been constructed again, empty, and its first call opens it for the step
    that sent it. (Arguments of its creation would be an earlier action's, for a kept host.)"""

    def __init__(self) -> None:
        # The environment this process started with, before any step's UDF was unpickled here:
        # each step's worker starts from it (``_open``).
        self._environ = dict(os.environ)
        self._token: str | None = None
        self._ended: collections.deque[str] = collections.deque(maxlen=8)  # steps closed here
        self._opening = threading.Lock()  # (a restarted host's calls overlap)
        self._udf: RayUdf | None = None
        self._failure: RemoteFailure | None = None

    def open(self, token: str, holder: list[Any]) -> bool:
        """Serve the step ``token`` names: its UDF constructed (anew, in a kept host); the
        constructor's error, if it fails, raised here and by every call."""
        with self._opening:
            self._open(token, holder)
        if self._failure is not None:
            raise self._failure
        return True

    def _open(self, token: str, holder: list[Any]) -> None:
        import ray

        from vane.config import configure

        args, kwargs, environment, idle = ray.get(holder[0])
        # Unpickling the step's UDF imported its modules here, and libraries add variables to
        # the environment as they are imported: a worker started from this process's
        # environment would start unlike the one an earlier step kept, and not be reused. So
        # every step's worker starts from the environment this host started with, with the
        # variables for the UDF's worker (``model_bars.py``) over it; this process's own is
        # left as the libraries here made it (some read what they added later). And the
        # driver's idle timeout, for which this process keeps that worker for the next action
        # (``actors/warm.py``).
        kwargs = {**kwargs, "environ": {**self._environ, **environment}}
        configure(worker_idle_timeout_s=idle)
        if self._udf is not None:  # (each step closes its own first: never left open here)
            with contextlib.suppress(Exception):
                self._udf.close(early=True)
        self._token = token
        self._udf = None
        self._failure = None
        try:
            self._udf = RayUdf(*args, **kwargs)
        except Exception as exc:  # the constructor's error, for every call (see the module)
            self._failure = RemoteFailure(error_to_bytes(exc), str(exc))

    def call(
        self, token: str, holder: list[Any], pieces: Sequence[Piece], *blocks: Any
    ) -> tuple[pa.Table, int]:
        """The answer to the batch made of ``pieces`` of ``blocks`` (Ray passes the blocks
        themselves, fetched into this process), and its rows."""
        with self._opening:  # (the step and its UDF read together: ``close`` may run beside)
            if token != self._token:
                if token in self._ended:
                    # Sent before its step ended early (a limit met): nobody reads it, and
                    # this host may already serve the next action's step.
                    return pa.table({}), 0
                self._open(token, holder)  # restarted by Ray (see the class)
            udf, failure = self._udf, self._failure
        if failure is not None:
            raise failure
        assert udf is not None
        answer = udf(joined(pieces, blocks))
        return answer, answer.num_rows

    def close(self, token: str, early: bool) -> None:
        """The UDF of the step ``token`` names: its ``teardown()`` (``early``: batches not
        started are dropped), and the instance let go. The driver then keeps the host for the
        next action (``parked.py``) or kills it. The step is ended here even if this host
        never opened for it (restarted by Ray before any call of it came back): a call of it
        that comes later is not answered (``call``)."""
        with self._opening:
            if self._token == token and self._udf is not None:
                self._udf.close(early=early)
            if token not in self._ended:
                self._ended.append(token)
            if self._token == token:
                self._udf = None
                self._token = None


def joined(pieces: Sequence[Piece], blocks: Sequence[Any]) -> pa.Table:
    tables = [table_of(blocks[index]).slice(start, rows) for index, start, rows in pieces]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


@functools.cache
def _host_class(ray: Any) -> Any:
    """``RayHost`` as a Ray actor class, made once per process."""
    return ray.remote(RayHost)


@dataclass
class _Batch:
    pieces: list[Piece]
    refs: list[Any]
    rows: int


def batches(blocks: Iterable[Block], size: int) -> Iterator[_Batch]:
    """Batches of ``size`` rows (the last may hold fewer) cut from ``blocks``, in order, a
    batch's rows from as many blocks as it takes."""
    with closing(iter(blocks)) as stream:
        yield from _cut(stream, size)


def _cut(blocks: Iterator[Block], size: int) -> Iterator[_Batch]:
    pieces: list[Piece] = []
    refs: list[Any] = []
    rows = 0
    for ref, first, count in blocks:
        start, stop = first, first + count
        while start < stop:
            take = min(size - rows, stop - start)
            if not refs or refs[-1] is not ref:
                refs.append(ref)
            pieces.append((len(refs) - 1, start, take))
            rows += take
            start += take
            if rows == size:
                yield _Batch(pieces, refs, rows)
                pieces, refs, rows = [], [], 0
    if rows:
        yield _Batch(pieces, refs, rows)


@dataclass
class _Host:
    handle: Any
    starting: Any  # its ``open`` call until it has answered, then None
    busy: int = 0
    kept: bool = False  # taken from the hosts kept by an earlier action (``parked.py``)


@dataclass
class _Call:
    answer: Any  # the answer's object ref
    rows: Any  # the ref of its row count (small: the driver waits on these)
    host: _Host
    done: bool = False
    count: int = 0


@dataclass
class StepHosts:
    """One UDF step of one action: its hosts and the batches in flight (see the module)."""

    ray: Any
    # RayUdf's arguments, and the environment of its worker process
    arguments: tuple[tuple[Any, ...], dict[str, Any], dict[str, str]]
    options: dict[str, Any]  # the Ray actor's: resources, placement
    rows_per_batch: int
    calls_per_host: int
    min_hosts: int
    max_hosts: int
    watch: Any  # the action's ResourceWatch
    key: int  # the step's id, for the watch's record of progress
    spare_cpus: float  # what growing leaves free for the tasks that feed the steps (fit.py)
    hosts: list[_Host] = field(default_factory=list)
    _ended: bool = False
    _grown_at: float = 0.0
    _token: str = field(default_factory=lambda: uuid.uuid4().hex)  # this step, to its hosts
    _holder: list[Any] = field(init=False)  # the ref of the hosts' arguments (see RayHost)
    _key: HostKey = field(init=False)  # what a kept host must have been started as
    _calls: collections.deque[_Call] = field(default_factory=collections.deque)
    _answered: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self._holder = [self.ray.put((*self.arguments, PARKED.timeout()))]
        self._key = HostKey.of(self.ray, self.options, self.calls_per_host, self.arguments[2])

    def answers(self, blocks: Iterable[Block]) -> Iterator[Block]:
        """The step's answers to ``blocks``, in order, one block per batch."""
        calls = self._calls
        waiting: _Batch | None = None
        exhausted = False
        early = True
        failed = False
        feed: Feed | None = None
        try:
            for _ in range(self.min_hosts):
                self._add_host()
            batches_ahead = self.calls_per_host * max(1, self.min_hosts)
            feed = Feed(batches(blocks, self.rows_per_batch), batches_ahead, "vane-ray-hosts")
            while True:
                while calls and calls[0].done:
                    call = calls.popleft()
                    yield call.answer, 0, call.count
                if waiting is None and not exhausted:
                    got = feed.take(0)
                    exhausted = got is END
                    waiting = None if exhausted else got
                if exhausted and not calls:
                    early = False
                    return
                host = self._free() if waiting is not None else None
                if waiting is not None and host is not None and len(calls) < self._most_in_flight():
                    calls.append(self._send(host, waiting))
                    waiting = None
                    continue
                wants_input = waiting is None and not exhausted
                waited = self._wait(calls, grow=waiting is not None, short=wants_input)
                if not waited and wants_input:
                    # nothing on Ray to wait for: the next batch is all there is
                    got = feed.take(_WAIT_SECONDS)
                    exhausted = got is END
                    waiting = None if exhausted else got
                    if waiting is None and not exhausted and self.watch.failure is not None:
                        raise self.watch.failure
                elif not waited:  # a batch in hand, no host up or starting: cannot happen
                    raise RuntimeError(f"vane: a Ray step has a batch and no host ({self.hosts})")
        except BaseException as exc:
            failed = not isinstance(exc, GeneratorExit)  # (a reader that stopped early)
            raise
        finally:
            # The hosts first: a read below may wait for a CPU they hold
            if failed:
                self.kill()
            else:
                self.end(early=early)
            if feed is not None:
                feed.close(wait=not failed)

    def end(self, *, early: bool) -> None:
        """Each host that is up runs the UDF's teardown (calls still queued on it run first,
        or are dropped when ``early``), waited for; then each is kept for the next action
        (``parked.py``), or killed when keeping is off. One still starting or waiting for
        resources is killed at once (it has nothing to tear down). So an action's steps have
        ended when it returns, as on the local runner: their UDFs' teardowns have run, and what
        they held is free, or held by hosts kept for the next action."""
        if self._ended:
            return
        self._ended = True
        hosts, self.hosts = self.hosts, []
        starting = [h.starting for h in hosts if h.starting is not None]
        if starting:  # up by now, though not yet seen to be: ended as those seen
            with contextlib.suppress(Exception):
                up = {
                    r.hex()
                    for r in self.ray.wait(starting, num_returns=len(starting), timeout=0)[0]
                }
                for host in hosts:
                    if host.starting is not None and host.starting.hex() in up:
                        host.starting = None
        closing: dict[int, Any] = {}
        for host in hosts:
            with contextlib.suppress(Exception):  # the cluster is going away, and the host too
                if host.starting is None:
                    closing[id(host)] = host.handle.close.remote(self._token, early)
                else:  # as the local runner stops an actor still starting: not waited for
                    self.ray.kill(host.handle)
        refs = list(closing.values())
        if refs:
            with self.watch.pulling():
                while self.ray.wait(refs, num_returns=len(refs), timeout=_WAIT_SECONDS)[1]:
                    if self.watch.failure is not None:
                        break  # (the runner raises it)
        for host in hosts:
            # Every batch answered and its teardown run: kept for the next action
            # (``parked.py``), unless keeping is off.
            if self._keeps(host, closing.get(id(host))):
                continue
            with contextlib.suppress(Exception):
                self.ray.kill(host.handle)

    def _keeps(self, host: _Host, closed: Any) -> bool:
        """Whether ``host``, whose ``close`` call is ``closed``, is kept (``parked.py``)."""
        if closed is None or not self._closed(closed) or PARKED.timeout() <= 0:
            return False
        # Out of this action's watch before another action can take it from the register: the
        # watch kills what it watches when this action fails.
        self.watch.released(host.handle)
        return PARKED.park(self.ray, self._key, host.handle)

    def _closed(self, ref: Any) -> bool:
        """Whether the host's ``close`` has returned, without an error."""
        try:
            if self.ray.wait([ref], timeout=0)[1]:
                return False
            self.ray.get(ref)
        except Exception:  # a host lost meanwhile: nothing to end
            return False
        return True

    def kill(self) -> None:
        """A failed step's hosts, killed now: they would otherwise run what was queued on
        them, holding their CPUs and GPUs, and the next action (a rerun with a larger budget)
        would wait for them. (No teardown runs after a failure, as on the local runner.)"""
        if self._ended:
            return
        self._ended = True
        hosts, self.hosts = self.hosts, []
        for call in self._calls:  # cancelled first: Ray would say it retries each on the kill
            if not call.done:
                with contextlib.suppress(Exception):
                    self.ray.cancel(call.answer)
        for host in hosts:
            with contextlib.suppress(Exception):
                self.ray.kill(host.handle)

    # ---- the loop's parts --------------------------------------------------------------------

    def _most_in_flight(self) -> int:
        # Answers kept waiting for an earlier, slower one are bounded too: twice what the hosts
        # can hold at once.
        return 2 * max(1, len(self.hosts)) * self.calls_per_host

    def _free(self) -> _Host | None:
        up = [h for h in self.hosts if h.starting is None and h.busy < self.calls_per_host]
        return min(up, key=lambda h: h.busy) if up else None

    def _send(self, host: _Host, batch: _Batch) -> _Call:
        answer, rows = host.handle.call.options(num_returns=2).remote(
            self._token, self._holder, batch.pieces, *batch.refs
        )
        host.busy += 1
        return _Call(answer, rows, host)

    def _add_host(self) -> None:
        """One more host: one an earlier action kept (``parked.py``), else a new one."""
        if not self._take_kept():
            self._start_new()

    def _take_kept(self) -> bool:
        """Whether a host an earlier action kept was taken (and asked to open)."""
        handle = PARKED.take(self._key)
        if handle is None:
            return False
        try:
            opened = handle.open.remote(self._token, self._holder)
        except Exception:  # a handle Ray no longer knows (its cluster is gone)
            return False
        self._started(_Host(handle, opened, kept=True))
        return True

    def _start_new(self) -> None:
        actor = _host_class(self.ray).options(
            max_restarts=-1,
            max_task_retries=-1,
            max_concurrency=self.calls_per_host,
            **self.options,
        )
        handle = actor.remote()
        self._started(_Host(handle, handle.open.remote(self._token, self._holder)))

    def _started(self, host: _Host) -> None:
        self.watch.started(host.handle)  # a failed action kills it at once (runner.py)
        self.hosts.append(host)
        self._grown_at = time.monotonic()

    def _wait(self, calls: collections.deque[_Call], *, grow: bool, short: bool) -> bool:
        """Until a call or a host's start has ended (raising what it raised), or the watch's
        next look (``short``: the next input's, ``POLL_SECONDS``): then what else has ended,
        and whether the step may take one more host. False if nothing was waited for."""
        pending = [c.rows for c in calls if not c.done]
        pending += [h.starting for h in self.hosts if h.starting is not None]
        if not pending:
            return False
        with self.watch.pulling():
            timeout = POLL_SECONDS if short else _WAIT_SECONDS
            ready, _ = self.ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            if self.watch.failure is not None:
                raise self.watch.failure
            if grow:
                self._grow()
            return True
        ended, _ = self.ray.wait(pending, num_returns=len(pending), timeout=0)
        ended_ids = {ref.hex() for ref in ended}
        for host in list(self.hosts):
            if host.starting is not None and host.starting.hex() in ended_ids:
                try:
                    self.ray.get(host.starting)  # raises the constructor's error
                except self.ray.exceptions.RayActorError:
                    if not host.kept:
                        raise
                    # A kept host that died while it waited (killed from outside; a lost
                    # node's is restarted instead): a new one takes its place.
                    self.hosts.remove(host)
                    self._start_new()
                    continue
                host.starting = None
        for call in calls:
            if not call.done and call.rows.hex() in ended_ids:
                try:
                    call.count = self.ray.get(call.rows)
                except Exception:
                    with contextlib.suppress(Exception):
                        self.ray.get(call.answer)  # (the same error: taken, so Ray logs none)
                    raise  # the batch's error
                call.done = True
                call.host.busy -= 1
                self.watch.moved(("answers", self.key), next(self._answered))
        if grow:
            self._grow()
        return True

    def _grow(self) -> None:
        """One more host, if batches wait for one, none is starting, the step may have more,
        and the cluster has room for one now (asked at most every ``_GROW_SECONDS``)."""
        if len(self.hosts) >= self.max_hosts or any(h.starting is not None for h in self.hosts):
            return
        if any(h.busy < self.calls_per_host for h in self.hosts):
            return
        if self._take_kept():  # what it holds is this step's to use
            return
        now = time.monotonic()
        if now - self._grown_at < _GROW_SECONDS:
            return
        self._grown_at = now
        free = self.ray.available_resources()
        # What one more host takes, and a CPU left for the tasks that read, filter and write
        # around the steps (as fit.py keeps one): a host must not starve what feeds it.
        shape = {
            "CPU": (self.options.get("num_cpus", 0) or 0) + self.spare_cpus,
            "GPU": self.options.get("num_gpus", 0) or 0,
            "memory": self.options.get("memory", 0) or 0,
        }
        if self.options.get("scheduling_strategy") is not None:
            return  # held to one node: the cluster's free resources do not say it fits there
        short = [n for n, amount in shape.items() if amount and free.get(n, 0.0) < amount - 1e-9]
        if not short:
            self._add_host()
        else:
            # Hosts kept for a later action (another step's of this one, ended already) give
            # way to a step that would grow now: what they hold is freed for its next look.
            PARKED.give_way(short)
