"""Atomic commit of written files: after a kill at any instant, vane sees all of a write or none.

Every write stages its files in ``.<name>.vane-staging-<token>`` beside the destination (beside
a symlink's target, so the link survives and the staging is on the target's filesystem), and
holds an ``flock`` on that directory for its whole life: a staging directory nobody holds
belongs to a dead writer (a process the writer forked holds none of its locks: ``Flock``). (It
is made under another name, locked, then renamed into place, so no one ever sees it unlocked
while its writer lives.) Then it commits, holding an exclusive ``flock`` on the destination's
lock ``.<name>.vane-lock``, which every commit to that destination takes in turn:

    mode       destination        commit step (one atomic step unless noted)
    error      absent or empty    rename(staging, destination)
    overwrite  absent             rename(staging, destination)
    overwrite  present            renameat2(staging, destination, RENAME_EXCHANGE): the path never
                                  disappears; the old data, now in the staging path, is deleted
    append     absent             rename(staging, destination)
    append     present            journal, then moves (below)

An append into an existing directory moves many files, so it is made atomic for vane by a
journal: ``destination/.vane-commit-<token>`` lists every file to move and is written (and
synced) before the first move; once it exists the append is decided and will complete. The
moves follow, then the journal is deleted. If the writer dies, the kernel drops its lock; the
next vane write or read of the destination takes the lock, finds the journal, and finishes the
moves (roll forward). A vane reader lists files holding shared the lock of every destination
it looks in, whether it was given the destination, a directory inside it (a partition), a
glob or a list of files there, so its listing falls wholly before or after any commit.

States of one write, and who cleans up after a kill in each:

    staging (writing)  --commit-->  [locked: journal? moves/rename/exchange]  --> done
          |                                  |
    killed: staging + its lock left;     killed: journal left in the destination;
    the next write removes them          the next vane read or write finishes it
    (its lock is free)                   (the destination lock is free)

What a reader that is not vane sees: error and overwrite commits are one rename, so a whole
old or whole new directory (an overwrite's old files are deleted after the swap: a reader
still reading them may fail). An append's files appear one by one during its moves, and after
a crash mid-append the files moved so far stay visible, without the rest, until vane next
touches the destination. Where ``renameat2`` is missing (not Linux, or a filesystem without
it) overwrite falls back to two renames, and between them the path is briefly absent.

Tests hold a writer between steps with ``VANE_COMMIT_PAUSE`` (see ``_pause``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from vane.errors import ConfigurationError, SinkError

WriteMode = Literal["error", "overwrite", "append"]
Listing = TypeVar("Listing")
MODES = ("error", "overwrite", "append")

_STAGING = ".vane-staging-"
_MAKING = ".vane-making-"  # a staging directory before it is locked
_JOURNAL = ".vane-commit-"
_LOCK = ".vane-lock"  # beside the destination: .<name>.vane-lock
# A ``making`` directory older than this belongs to a writer killed in its first instant.
_MAKING_TIMEOUT_SECONDS = 3600


# ---- operating system steps ---------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc: Any = None  # (a ctypes.CDLL: ctypes loads with the first exchange, not with every read)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2``); False where the OS or the
    filesystem cannot, and the caller falls back."""
    import ctypes
    import ctypes.util

    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        _libc = ctypes.CDLL(name, use_errno=True)
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


# ---- locks ------------------------------------------------------------------------------------


class Flock:
    """An ``flock`` this process holds on a directory for a while (a write's staging, a
    resumable write's saved work), through a descriptor of its own.

    A process forked while a lock is held (a UDF's own multiprocessing pool, a DataLoader's
    workers, from any thread) shares the descriptor's lock and would hold it on after this
    process lets go, until the child exits: a staging directory would look alive to the next
    write, a destination's lock would keep the next commit waiting, a resume folder would
    refuse every rerun. So a forked child closes its copies of every vane lock as it starts
    (only its copies: the parent's locks stay held); ``locked`` keeps its files for it too. A
    descriptor is known to the child from its opening on (a fork waits while one is being
    opened), before it is ever locked."""

    __slots__ = ("descriptor",)

    def __init__(self) -> None:
        self.descriptor = -1  # (opened by ``open``: the caller holds it first, to release it)

    def open(self, path: Path, flags: int) -> None:
        """Open ``path`` with ``flags``, not yet locked (``lock``); ``release`` closes it."""
        with _OPENING:  # (a fork waits: the child knows of the descriptor, and closes it)
            _FLOCKS.add(self)
            self.descriptor = os.open(path, flags)

    def lock(self, operation: int) -> bool:
        """Take the lock (``fcntl.LOCK_*``); False if ``LOCK_NB`` was asked and another holds
        it. Raises what ``flock`` raises; the caller releases either way."""
        try:
            fcntl.flock(self.descriptor, operation)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        """Let the lock go (once: a second call, or one in a forked child, does nothing; a
        Ctrl-C that lands in it leaves it closed or, at its first line, for a second call)."""
        with _OPENING:  # (a fork waits: no child gets the descriptor as it is being closed)
            descriptor, self.descriptor = self.descriptor, -1  # (one line: no Ctrl-C between)
            if descriptor >= 0:
                os.close(descriptor)
            _FLOCKS.discard(self)


_FLOCKS: set[Flock] = set()  # the directory locks this process holds
_LOCK_FILES: weakref.WeakSet[io.FileIO] = weakref.WeakSet()  # the lock files ``locked`` holds
# Held while a lock's descriptor is opened and noted, or closed: a fork waits. (Re-entrant: a
# signal handler that forks may run inside it.)
_OPENING = threading.RLock()


def _before_fork() -> None:
    _OPENING.acquire()


def _after_fork_in_parent() -> None:
    with contextlib.suppress(RuntimeError):  # (not taken: a Ctrl-C stopped the wait for it)
        _OPENING.release()


def _after_fork_in_child() -> None:
    global _OPENING
    _OPENING = threading.RLock()
    for held in list(_FLOCKS):
        descriptor, held.descriptor = held.descriptor, -1
        if descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(descriptor)
    _FLOCKS.clear()
    for handle in list(_LOCK_FILES):
        with contextlib.suppress(OSError):
            handle.close()  # (a closed file stays closed: the parent's thread's ``with`` is moot)


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


@contextlib.contextmanager
def locked(path: Path, *, shared: bool = False, create: bool = True) -> Iterator[bool]:
    """Hold an ``flock`` on ``path`` (created if missing and ``create``); yields False if
    there is no lock file to take (a reader never creates one). The file object closes the
    lock wherever a Ctrl-C lands (its close is one C call, and so is its collection)."""
    handle: io.FileIO | None = None
    with _OPENING:  # (a fork waits until the file is noted: the child closes it)
        try:
            handle = open(path, "ab" if create else "rb", buffering=0)  # noqa: SIM115 - below
        except FileNotFoundError:
            pass
        except PermissionError:
            pass  # a read-only destination: nobody commits there
        else:
            _LOCK_FILES.add(handle)
    if handle is None:
        yield False
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield True
    finally:
        with _OPENING:  # (a fork waits: no child gets the file as it is being closed)
            handle.close()


def _held(path: Path) -> bool:
    """Whether a live process holds an ``flock`` on ``path`` (a file or a directory)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # also releases the lock if we just took it
    return False


def abort_surely(abort: Callable[[], None]) -> None:
    """Run ``abort`` (a write's cleanup, which is safe to run twice) to its end even if Ctrl-C
    lands in it. One Ctrl-C can arrive twice: vane's watcher interrupts DuckDB, whose error
    starts the cleanup, and Python's own handler then raises KeyboardInterrupt at the next
    line, inside it. The signal is spent by then, so a second run finishes; the interrupt is
    raised after it."""
    try:
        abort()
    except KeyboardInterrupt:
        abort()
        raise


# ---- writes under way, for a Ctrl-C --------------------------------------------------------


class Abortable(Protocol):
    def abort(self) -> None: ...


class Begun:
    """What one action (``writes_started``) began on a thread and has not yet seen through: a
    write, and inside it each staging, which notes itself *before* it makes anything (a
    directory, a marker), so that wherever a Ctrl-C lands in a write's start, what the start
    made is known to ``abort_unfinished``. Each action keeps its own: a stream abandoned
    mid-way and collected later (during another write, say) aborts only what it began."""

    __slots__ = ("handed_out", "items", "stack")

    def __init__(self, stack: list[Begun], *, handed_out: bool) -> None:
        self.items: list[Abortable] = []
        self.stack = stack  # the thread's actions under way, this one among them
        self.handed_out = handed_out


_unfinished = threading.local()


def _stack() -> list[Begun]:
    """This thread's actions under way, the latest last, above what no action began (a
    staging a test makes by itself)."""
    found: list[Begun] | None = getattr(_unfinished, "stack", None)
    if found is None:
        found = []
        found.append(Begun(found, handed_out=True))  # (never ended, nor swept)
        _unfinished.stack = found
    return found


def begun(item: Abortable) -> None:
    """Note ``item`` as under way in the latest action: until ``seen_through``, that action
    aborts it if it is interrupted."""
    _stack()[-1].items.append(item)


def seen_through(item: Abortable) -> None:
    """``item`` was aborted, or began its commit (from there its own protocol answers for it)."""
    for action in reversed(_stack()):
        for at, held in enumerate(action.items):
            if held is item:
                del action.items[at]
                return


def writes_started(*, handed_out: bool = False) -> Begun:
    """An action begins on this thread: what is begun from here until it ends is its own. One
    ``handed_out`` (a stream of rows, a generator the caller holds) may end after later
    actions began, or on another thread (collected by the garbage collector)."""
    stack = _stack()
    action = Begun(stack, handed_out=handed_out)
    stack += [action]  # (no call: no Ctrl-C between its push and its return)
    return action


def abort_unfinished(action: Begun) -> None:
    """The action ends: abort what it began and neither began its commit nor finished an
    abort. A Ctrl-C can land at the first line of a cleanup, before it has done anything, or
    in a write's start before the write exists to be aborted; the action that ran the write
    calls this as it unwinds, when that signal is spent. (A commit that began is left to its
    own protocol, which the next write completes or undoes.) An action not handed out also
    ends the actions begun inside it that a Ctrl-C kept from ending themselves: every one
    above it but those handed out, which end when their holder lets go of them."""
    stack = action.stack
    ending = [action]
    if not action.handed_out:
        inside = False
        for each in stack:
            if inside and not each.handed_out:
                ending.append(each)
            inside = inside or each is action
    try:
        for each in reversed(ending):  # (the innermost first)
            while each.items:
                item = each.items[-1]  # (taken off by its abort: ``seen_through``)
                abort_surely(item.abort)
                if each.items and each.items[-1] is item:
                    del each.items[-1]
    finally:
        remaining: list[Begun] = []
        for each in stack:
            for gone in ending:
                if each is gone:
                    break
            else:
                remaining += [each]
        stack[:] = remaining  # (in one step)


def _locked_directory(final: Path) -> Flock:
    """Make the directory ``final`` already locked: made under another name, locked, renamed.
    Returns the lock, held."""
    making = final.with_name(final.name.replace(_STAGING, _MAKING, 1))
    held = Flock()
    try:
        making.mkdir()
        held.open(making, os.O_RDONLY)
        held.lock(fcntl.LOCK_EX)
        os.rename(making, final)  # the lock is the inode's: it moves with it
    except BaseException:  # Ctrl-C on the way: leave neither directory behind
        held.release()
        for left in (making, final):
            with contextlib.suppress(OSError):
                left.rmdir()
        raise
    return held


def _pause(step: str) -> None:
    """A test hook: with ``VANE_COMMIT_PAUSE=<step>:<file>``, create ``<file>`` on reaching
    ``step`` and wait there while it exists (a test kills the process, or deletes the file to
    let it go on). Unset in normal use."""
    setting = os.environ.get("VANE_COMMIT_PAUSE")
    if not setting:
        return
    wanted, _, marker = setting.partition(":")
    if wanted == step:
        Path(marker).write_text(str(os.getpid()))
        while Path(marker).exists():
            time.sleep(0.01)


def _write_durably(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# ---- where a destination's files live --------------------------------------------------------


def resolve(destination: Path) -> Path:
    """The real path to write: a symlink's target (absolute), else the path itself."""
    return Path(os.path.realpath(destination)) if destination.is_symlink() else destination


def lock_path(destination: Path) -> Path:
    return destination.parent / f".{destination.name}{_LOCK}"


def _exists_with_content(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists()


def recover(destination: Path) -> None:
    """Finish the commits that writers died in, and remove what dead writers staged. Call it
    holding the destination's lock exclusively."""
    if destination.is_dir():
        for journal in sorted(destination.glob(f"{_JOURNAL}*")):
            if not journal.name.endswith(".tmp"):
                _finish(destination, journal)
            else:
                journal.unlink(missing_ok=True)
    remove_dead_staging(destination)


def remove_dead_staging(destination: Path) -> None:
    """Remove the staging of writers that died before committing. Safe without the
    destination's lock only where no commit ever began (no journal can name a staging)."""
    for path in destination.parent.glob(f".{destination.name}{_STAGING}*"):
        # "-old": the old copy a fallback swap moved aside (unlocked: its writer deletes it)
        if path.name.endswith("-old") or not _held(path):
            shutil.rmtree(path, ignore_errors=True)
    for path in destination.parent.glob(f".{destination.name}{_MAKING}*"):
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > _MAKING_TIMEOUT_SECONDS:
                shutil.rmtree(path, ignore_errors=True)


def _finish(destination: Path, journal: Path) -> None:
    """Roll a journaled append forward: every file it lists ends in the destination."""
    entry = json.loads(journal.read_text())
    staging = Path(entry["staging"])
    for relative in entry["files"]:
        source, target = staging / relative, destination / relative
        if source.exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)
    journal.unlink()
    shutil.rmtree(staging, ignore_errors=True)


def list_consistently(
    list_files: Callable[[], Listing],
    places: Callable[[Listing], Iterable[str]],
    start: Iterable[str] = (),
) -> tuple[Listing, frozenset[str]]:
    """For a reader: ``list_files()`` run while no vane commit can change what it lists, after
    any commit a dead writer left half done is finished.

    ``places(listing)`` names the directories the listing looked in (where the files it found
    are, the directories and glob roots it was given); every vane destination that is one of
    them or holds one (a partition directory of a partitioned write, say) is locked shared
    while listing, and a destination the listing finds for the first time is listed again
    under its lock (``start``: places known before listing, whose destinations are locked
    from the first listing on). Returns the listing, and the real paths of files that a commit
    vane could not finish (no permission to write) would add: leave them out, vane shows none
    of it."""
    held = destinations(start)
    stuck: dict[Path, frozenset[str]] = {}
    while True:
        unfinished: list[Path] = []
        with contextlib.ExitStack() as stack:
            for destination in sorted(held):
                stack.enter_context(locked(lock_path(destination), shared=True, create=False))
            unfinished = [d for d in sorted(held) if d not in stuck and _journals(d)]
            if not unfinished:
                listing = list_files()
                found = destinations(places(listing))
                if found <= held:
                    return listing, frozenset().union(*stuck.values())
        if unfinished:  # dead writers' appends: finish them (that needs the lock alone)
            for destination in unfinished:
                left = _finish_for_reader(destination)
                if left:
                    stuck[destination] = left
        else:
            held |= found


def _journals(destination: Path) -> list[Path]:
    return [j for j in destination.glob(f"{_JOURNAL}*") if not j.name.endswith(".tmp")]


def _finish_for_reader(destination: Path) -> frozenset[str]:
    """Finish the appends dead writers left in ``destination``; the files of any that cannot
    be finished (no permission to write)."""
    with locked(lock_path(destination), create=False):
        with contextlib.suppress(OSError):
            recover(destination)
        left: set[str] = set()
        for journal in _journals(destination):
            with contextlib.suppress(OSError, ValueError):
                listed = json.loads(journal.read_text())["files"]
                left.update(str(destination / f) for f in listed)
        return frozenset(left)


def destinations(places: Iterable[str]) -> set[Path]:
    """The vane destinations (directories a write committed to, which have a lock file beside
    them) that are one of ``places`` or hold one, by their real paths."""
    real: dict[str, str] = {}
    seen: dict[str, bool] = {}
    found: set[Path] = set()
    for place in places:
        directory = _real_directory(os.path.abspath(place), real)
        while directory not in seen:
            parent, name = os.path.split(directory)
            seen[directory] = bool(name) and os.path.exists(os.path.join(parent, f".{name}{_LOCK}"))
            if seen[directory]:
                found.add(Path(directory))
            if parent == directory:
                break
            directory = parent
    return found


def _real_directory(path: str, known: dict[str, str]) -> str:
    """``path`` with its symlinks resolved, each directory's looked up once: a read of many
    partition directories resolves their shared parents once."""
    if path in known:
        return known[path]
    parent, name = os.path.split(path)
    if not name:
        return path
    candidate = os.path.join(_real_directory(parent, known), name)
    resolved = os.path.realpath(candidate) if os.path.islink(candidate) else candidate
    known[path] = resolved
    return resolved


# ---- one write --------------------------------------------------------------------------------


class Staging:
    """The staging directory of one write; ``commit`` moves its files into the destination."""

    def __init__(self, destination: Path, mode: WriteMode, *, single_file: bool) -> None:
        if mode not in MODES:
            raise ConfigurationError(f"mode={mode!r} is not one of {', '.join(MODES)}")
        self.shown = destination  # the path as the user gave it, for messages
        self.destination = resolve(destination)
        self.mode = mode
        self.single_file = single_file
        self.token = uuid.uuid4().hex[:12]
        self._check_destination()
        self.destination.parent.mkdir(parents=True, exist_ok=True)
        name = f".{self.destination.name}{_STAGING}{self.token}"
        self.directory = self.destination.parent / name
        self._journal: Path | None = None
        self._lock: Flock | None = None
        begun(self)  # before the directory exists: a Ctrl-C from here on finds it
        try:
            # Held for the write's whole life: while it is, nobody removes this staging.
            self._lock = _locked_directory(self.directory)
            # Leftovers of killed writes. The lock exists once any commit to here has begun;
            # until then no journal exists and dead staging can go without it.
            with locked(lock_path(self.destination), create=False) as held:
                if held:
                    recover(self.destination)
                else:
                    remove_dead_staging(self.destination)
        except BaseException:  # an error, or Ctrl-C: this write's staging goes with it
            abort_surely(self.abort)
            raise

    def _check_destination(self) -> None:
        dest, shown = self.destination, str(self.shown)
        if self.mode == "error" and _exists_with_content(dest):
            raise SinkError(
                f"{shown!r} already exists. Pass mode='overwrite' to replace it"
                + ("" if self.single_file else ", or mode='append' to add files to it")
            )
        if self.mode == "append":
            if self.single_file:
                raise SinkError(
                    f"mode='append' adds files to a directory, but {shown!r} names a single "
                    "file. Write to a directory path instead, such as 'out/'"
                )
            if dest.exists() and not dest.is_dir():
                raise SinkError(f"mode='append' needs a directory, but {shown!r} is a file")
        if not self.single_file and dest.is_file() and self.mode != "overwrite":
            raise SinkError(f"{shown!r} is a file; writing needs a directory path")

    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.rglob("*") if p.is_file())

    def commit(self) -> Path:
        """Move the staged files into place in one atomic step (an append: journaled). The
        old data an overwrite replaced ends in the staging path, and ``abort`` deletes it."""
        dest = self.destination
        seen_through(self)  # from here the commit protocol answers for this staging
        _pause("staged")
        try:
            with locked(lock_path(dest)):
                _pause("locked")
                recover(dest)
                old = self._commit_locked()
            if old is not None:
                _pause("swapped")
                if old != self.directory:
                    shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
        except OSError as exc:
            if self._journal is not None and self._journal.exists():
                raise SinkError(
                    f"moving the appended files into {str(self.shown)!r} stopped: {exc}. The "
                    "append is recorded, and vane finishes it the next time it reads or writes "
                    "this path; until then vane does not show any of it"
                ) from exc
            raise SinkError(
                f"cannot move the written files into {str(self.shown)!r}: {exc}. Nothing was "
                "changed"
            ) from exc
        finally:
            self.abort()
        return dest

    def _commit_locked(self) -> Path | None:
        """The commit step; returns where the replaced old data now is, to delete."""
        dest = self.destination
        if self.single_file:
            (staged,) = self.files()
            if dest.is_dir():
                return self._swap(staged)
            if self.mode == "error":
                try:
                    os.link(staged, dest)  # refuses an existing name, unlike rename
                except FileExistsError:
                    raise SinkError(
                        f"{str(self.shown)!r} appeared while writing; nothing was changed"
                    ) from None
            else:
                os.replace(staged, dest)
            return None
        if self.mode == "append" and dest.is_dir() and _exists_with_content(dest):
            self._append()
            return None
        if self.mode == "overwrite" and dest.exists():
            return self._swap(self.directory)
        try:
            os.rename(self.directory, dest)  # an empty directory is replaced
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise SinkError(
                f"{str(self.shown)!r} appeared while writing; nothing was changed"
            ) from None
        return None

    def _swap(self, new: Path) -> Path:
        """Put ``new`` at the destination in place of what is there; return the old one's
        new path."""
        dest = self.destination
        if exchange(new, dest):
            return new
        # No atomic exchange here: two renames, with the destination briefly absent.
        old = self.directory.with_name(self.directory.name + "-old")
        os.rename(dest, old)
        try:
            os.rename(new, dest)
        except BaseException:
            os.rename(old, dest)
            raise
        return old

    def _append(self) -> None:
        dest = self.destination
        files = [str(f.relative_to(self.directory)) for f in self.files()]
        taken = [f for f in files if (dest / f).exists()]
        if taken:
            raise SinkError(f"{str(self.shown)!r} already holds {taken[0]!r}; nothing was changed")
        journal = dest / f"{_JOURNAL}{self.token}"
        _write_durably(journal, json.dumps({"staging": str(self.directory), "files": files}))
        self._journal = journal  # from here on the append is decided: never delete its files
        _pause("journaled")
        moved: list[str] = []
        try:
            for relative in files:
                target = dest / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.directory / relative, target)
                moved.append(relative)
                if len(moved) == 1:
                    _pause("moving")
        except BaseException:
            # Still alive: take back what was moved (a killed writer is rolled forward instead).
            for relative in reversed(moved):
                os.rename(dest / relative, self.directory / relative)
            journal.unlink()
            raise
        journal.unlink()

    def abort(self) -> None:
        """Remove the staging directory, whatever was written into it, and its lock; but an
        append whose journal is written keeps its files for the roll-forward."""
        if self._journal is None or not self._journal.exists():
            shutil.rmtree(self.directory, ignore_errors=True)
        if self._lock is not None:
            with contextlib.suppress(OSError):
                self._lock.release()  # (once: a second abort does nothing)
        seen_through(self)
