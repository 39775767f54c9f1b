"""Work begun on a thread of its own, its answer or its error waited for later: an actor's
start beside the stage that will need it, DuckDB's settings asked as the database opens
(``_engine``), a Ray dataset built while its resource watch runs. Below every other module, so
that the database's own module may use it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str, *, daemon: bool = True) -> Future[T]:
    """``work`` run on a thread named ``name``, a daemon unless asked; what it returns, or
    raises, in the future. (A thread per call, not a pool: each is begun once per step or per
    write, and a pool would keep threads after its work is done.) A daemon is not waited for
    as the interpreter exits, and one stopped inside a C++ library (a DuckDB query) aborts the
    process: a caller whose work runs there waits for the future on every way out, or asks
    for a thread that is not a daemon (which the interpreter waits for as it exits)."""
    done: Future[T] = Future()

    def run() -> None:
        try:
            answer = work()
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(answer)

    threading.Thread(target=run, name=name, daemon=daemon).start()
    return done
