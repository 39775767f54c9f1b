"""Every lock vane holds (a write's staging directory, a destination's commit lock, a resumable
write's folder) is this process's alone: a process forked while one is held (a UDF's own
multiprocessing pool, a DataLoader's workers, from any thread) closes its copy as it starts, so
it never holds the lock on after vane lets it go, and never lets go of the parent's."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vane.io import commit
from vane.io.commit import Staging
from vane.io.resume import ResumeStore


@contextlib.contextmanager
def _staging(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    staging = Staging(tmp_path / "out", "error", single_file=False)
    assert staging._lock is not None
    yield staging.directory, staging._lock.descriptor
    staging._lock.release()  # (the write's end lets go of it; the directory stays, to look at)


@contextlib.contextmanager
def _commit_lock(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / ".out.vane-lock"
    with commit.locked(path):
        (handle,) = [h for h in commit._LOCK_FILES if h.name == str(path) and not h.closed]
        yield path, handle.fileno()


@contextlib.contextmanager
def _resume_folder(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    store = ResumeStore(str(tmp_path / "out"), "write_parquet")
    store.open({"plan": "p", "steps": {}, "inputs": {}}, restart=False)
    assert store._held is not None
    yield store.path, store._held.descriptor
    store._let_go()


Lock = Callable[[Path], contextlib.AbstractContextManager[tuple[Path, int]]]
LOCKS: dict[str, Lock] = {"staging": _staging, "commit": _commit_lock, "resume": _resume_folder}


@contextlib.contextmanager
def _forked_child(then: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """A child forked here, alive until the block ends; it runs ``then`` as it starts and
    says whether that held (its exit code, checked at the end)."""
    child_read, parent_write = os.pipe()
    parent_read, child_write = os.pipe()
    child = os.fork()
    if child == 0:  # the child (its fork hooks have run): reports, lives until told
        try:
            ok = then()
        except BaseException:
            ok = False
        os.write(child_write, b"x")
        os.read(child_read, 1)
        os._exit(0 if ok else 1)
    os.close(child_read)
    os.close(child_write)
    os.read(parent_read, 1)  # (it has started)
    os.close(parent_read)
    try:
        yield
    finally:
        os.write(parent_write, b"x")
        os.close(parent_write)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's check failed"


@pytest.mark.parametrize("kind", LOCKS)
def test_a_forked_child_holds_no_lock_after_vane_lets_go(tmp_path, kind):
    lock = LOCKS[kind](tmp_path)
    path, _ = lock.__enter__()
    with _forked_child():
        assert commit._held(path)
        lock.__exit__(None, None, None)  # vane lets go; the child lives on
        assert not commit._held(path)


@pytest.mark.parametrize("kind", LOCKS)
def test_a_forked_child_leaves_the_parents_lock_held(tmp_path, kind):
    """The child closes only its copy: the parent's lock stays (a lock released by ``LOCK_UN``
    in the child would free it for everyone)."""
    with LOCKS[kind](tmp_path) as (path, _):
        with _forked_child():
            pass  # the child has started and closed its copy
        assert commit._held(path)


@pytest.mark.parametrize("kind", LOCKS)
def test_a_child_forked_inside_the_block_lets_go_of_nothing_as_it_leaves_it(tmp_path, kind):
    """Forked in the thread that holds the lock, the child runs the block's end too: it closes
    nothing, not even a descriptor of its own that took the lock's number since."""
    lock = LOCKS[kind](tmp_path)
    path, number = lock.__enter__()

    def the_child_leaves_the_block() -> bool:
        own = os.open(os.devnull, os.O_RDONLY)
        os.dup2(own, number)  # (the lock's number, free in the child: now a file of its own)
        assert not [f for f in commit._FLOCKS if f.descriptor >= 0]
        assert not [f for f in commit._LOCK_FILES if not f.closed]
        lock.__exit__(None, None, None)
        os.fstat(number)  # still open
        return True

    try:
        with _forked_child(the_child_leaves_the_block):
            assert commit._held(path)
    finally:
        lock.__exit__(None, None, None)
    assert not commit._held(path)
