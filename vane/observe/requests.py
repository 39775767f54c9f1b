"""Requests in flight per server, counted where they are sent: inside an actor, by its HTTP
clients (the OpenAI-compatible provider), and reported to the actor's host a few times a
second at most whatever the request rate, and once more before each batch's result.

The host (a thread actor, a worker process, a Ray actor's worker) gives the actor a
``ServerLoad`` while its UDF is constructed (``counting``); each client made meanwhile takes a
``RequestCounts`` from it (``counts_for``) and bumps plain integers on it around each request:
no lock, since an actor's clients all run on its one event loop, and no call per request. A
change arms one timer on that loop (``REPORT_SECONDS``); when it fires, the actor's counts,
summed per server, go to the host's ``report`` (which hands them on as a ``ServerRequests``
event, a frame to the driver, or a note to the Ray action's tally). What a timer still holds
is reported before each batch's result goes (``flush``): a host that reads the counts once the
last batch is in (the Ray action's tally) sees the last change. A client made with no
``ServerLoad`` around (outside an actor) counts nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any

from vane.observe.events import ServerCount, merge_servers

# At most this often an actor reports its counts: the last change of a burst is reported this
# long after it at the latest, and a busy actor costs its host a few reports a second.
REPORT_SECONDS = 0.2

Report = Callable[[tuple[ServerCount, ...]], None]

_current: contextvars.ContextVar[ServerLoad | None] = contextvars.ContextVar(
    "vane_server_load", default=None
)


class RequestCounts:
    """One client's requests to its one server. Its client bumps the fields and calls
    ``moved()``, all on the actor's event loop."""

    __slots__ = ("_load", "in_flight", "retried", "sent", "server")

    def __init__(self, server: str, load: ServerLoad) -> None:
        self.server = server
        self.in_flight = self.sent = self.retried = 0
        self._load = load

    def moved(self) -> None:
        self._load.moved()

    def count(self) -> ServerCount:
        return ServerCount(self.server, self.in_flight, self.sent, self.retried)


class ServerLoad:
    """One actor's clients' counts, and when to report them."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._counts: list[RequestCounts] = []
        self._due: Any = None  # the armed timer (an asyncio.TimerHandle), until it fires

    def counts(self, server: str) -> RequestCounts:
        counts = RequestCounts(server, self)
        self._counts.append(counts)
        return counts

    def snapshot(self) -> tuple[ServerCount, ...]:
        return merge_servers([[c.count() for c in self._counts]])

    def moved(self) -> None:
        if self._due is not None:
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # counted off an event loop: nothing to wait on, so report now
            self._send()
            return
        self._due = loop.call_later(REPORT_SECONDS, self._send)

    def _send(self) -> None:
        self._due = None
        report_safely(self._report, self.snapshot())

    def flush(self) -> None:
        """Report now what a timer still waits to report: a batch's result is about to go
        (a host may read the counts once the last one is in), or the actor's loop is ending
        and the timer would never fire."""
        due, self._due = self._due, None
        if due is not None:
            due.cancel()
            report_safely(self._report, self.snapshot())


def report_safely(report: Report, servers: tuple[ServerCount, ...]) -> None:
    """Hand ``servers`` to ``report``, which may fail (the Ray driver's tally actor gone,
    say) without failing the requests, or the batch whose result comes next: the
    counts are watched, never part of the work."""
    try:
        report(servers)
    except Exception:
        global _failed
        if not _failed:
            _failed = True
            log.warning(
                "reporting requests in flight to %r failed; the requests and the action go "
                "on (later failures are not logged)",
                report,
                exc_info=True,
            )


_failed = False
log = logging.getLogger("vane")


@contextlib.contextmanager
def counting(load: ServerLoad | None) -> Iterator[None]:
    """Clients made inside count their requests on ``load`` (None: they count nothing)."""
    token = _current.set(load)
    try:
        yield
    finally:
        _current.reset(token)


def counts_for(server: str) -> RequestCounts | None:
    """What a client made now counts its requests to ``server`` on; None outside an actor."""
    load = _current.get()
    return None if load is None else load.counts(server)
