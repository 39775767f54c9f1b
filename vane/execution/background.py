"""Work begun on a thread of its own, its answer or its error waited for later: an actor's
start beside the stage that will need it, DuckDB's settings asked while a write plans, a Ray
dataset built while its resource watch runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """``work`` run on a daemon thread named ``name``; what it returns, or raises, in the
    future. (A thread per call, not a pool: each is begun once per step or per write, and a
    pool would keep threads after its work is done.) A daemon is not waited for as the
    interpreter exits, and one stopped inside a C++ library (a DuckDB query) aborts the
    process: a caller whose work runs there waits for the future on every way out."""
    done: Future[T] = Future()

    def run() -> None:
        try:
            answer = work()
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(answer)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done
