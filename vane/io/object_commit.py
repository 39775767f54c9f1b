"""Atomic commit on object stores (S3 and every remote filesystem), which have no rename: after
a kill at any instant, and under concurrent writers, a vane reader sees all of a write or none.

A write to the prefix ``D/`` puts its data files directly under their final names, each name
holding the write's token (``D/part-<token>-00000.parquet``, ``D/k=v/part-<token>-...``), so
writers never collide and no file is ever moved. What a vane reader reads is decided by a log
of small JSON manifests, ``D/_vane_log/<version>.json``, one per committed write, each written
last and in one request:

    {"write": token, "mode": "overwrite" | "append", "files": [paths relative to D], "rows": n}

Version ``n + 1`` is written with a conditional put (S3 ``If-None-Match: *``; an exclusive
create elsewhere), so of two writers that read version ``n`` only one commits ``n + 1``; the
other reads the log again and tries ``n + 2`` (``mode="error"`` then fails, as the prefix now
holds data). The commit step is that one put:

    mode       log                 manifest written
    error      none, no data       overwrite, the new files
    overwrite  any                 overwrite, the new files
    append     none, no data       overwrite, the new files
    append     none, data there    overwrite, the files there (written by others) + the new ones
    append     present             append, the new files

A vane reader of ``D`` (or of a partition or a glob inside it) reads the log, newest manifest
first, back to the newest ``overwrite``: the union of their files is what ``D`` holds. Files
under ``D`` that no manifest names (a write in progress, a dead writer's parts, data an
overwrite replaced) are not read. A prefix without a log (data written by other tools) is read
by listing, as a local directory is, leaving out the files of vane writes that have not
committed (their markers, below, are listed after the files, and the listing is made again if
a first manifest appears meanwhile).

A write puts a marker ``D/_vane_writes/<token>.json`` (host, process id, start time) before its
first file, and deletes it once it has committed or aborted. Every write, before it starts,
removes what no live write owns and no manifest shows: files an overwrite replaced, and the
files of dead writes (their marker names a process on this host that is gone, or is older than
``STALE_WRITE_SECONDS``), then their markers. Files are listed before the markers and the
markers before the log, so a file of a write that is starting, or of one that commits
meanwhile, is never taken for garbage. An overwrite, once committed, also removes the files
it replaced among those its start listed (not those of writes live then: they may commit after
it; the next write removes what is left).

What one commit asks of the store, so that its cost does not grow with the files it writes:
three listings at the start (the prefix, the markers, the log), each manifest read once; no
listing at the commit of an overwrite, or of an append to a prefix with a log (the put of the
version after the one seen at the start is tried first: the conditional put refuses it if
another write took it, and the log is listed again); two for ``mode="error"`` (the prefix, whose
listing holds the log, then the markers), which must look again. Sizes come from the upload
streams, removals go in one request per thousand objects (S3's DeleteObjects), and the marker is
one put. Measured on moto: 5 listings for a first write, 3 for an append or an overwrite, at any
number of files (13, 7 and 7 before).

A single file (``s3://b/out.parquet``) is written under ``<parent>/_vane_staging/<token>/`` and
then copied into place server-side, which the store does atomically for one object (S3's
CopyObject: up to 5 GB); ``mode="error"`` is checked before the copy, not by it (two writers
of one new file at once: the last copy wins).

Not covered: a single file written inside a prefix that vane writes commit to is in no manifest,
so vane readers of the prefix do not see it and its next write removes it. The log is not
compacted: a reader reads every manifest since the last overwrite.

States of one write, and who cleans up after a kill in each:

    marker + parts (writing)  --conditional put of the manifest-->  done (marker deleted)
          |                                      |
    killed: marker and parts left, not read;   killed after the put: committed; its marker is
    the next write removes them                removed, and replaced files, by the next write

What a reader that is not vane sees: every data file under ``D``, those of writes in progress or
dead included, and after an overwrite the old files until the writer deletes them (just after
its commit). Point such readers at a table format (``write_lance``, ``write_iceberg``, ...) or
read through vane. A writer that is not vane writing into ``D`` after vane's first commit is
not seen by vane readers (its files are in no manifest), and the next vane write to ``D``
removes its files (hidden names, ``_SUCCESS`` say, excepted).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vane.errors import ConfigurationError, SinkError
from vane.io import object_puts
from vane.io.commit import MODES, WriteMode, begun, seen_through
from vane.io.storage import Location, concurrent_requests, fsspec_of
from vane.io.storage_errors import storage_errors

if TYPE_CHECKING:
    import pyarrow.fs as pafs

LOG = "_vane_log"
WRITES = "_vane_writes"
STAGING = "_vane_staging"
# A write whose marker is older than this, on another host, is taken for dead.
STALE_WRITE_SECONDS = 24 * 3600
_COMMIT_ATTEMPTS = 50
_VERSION_DIGITS = 20


def _pause(step: str) -> None:
    from vane.io.commit import _pause as pause

    pause(f"remote-{step}")


def _info(fs: pafs.FileSystem, path: str) -> Any:
    return fs.get_file_info(path)


def _list(fs: pafs.FileSystem, path: str, *, recursive: bool = True) -> list[Any]:
    from pyarrow.fs import FileSelector, FileType

    selector = FileSelector(path.rstrip("/"), recursive=recursive, allow_not_found=True)
    return [i for i in fs.get_file_info(selector) if i.type == FileType.File]


def versions(fs: pafs.FileSystem, root: str) -> list[tuple[int, Any]]:
    """The log's manifests, oldest first: (version, the listing's FileInfo of it)."""
    return _versions_in(_list(fs, f"{root.rstrip('/')}/{LOG}", recursive=False))


def _versions_in(listed: Iterable[Any]) -> list[tuple[int, Any]]:
    found = []
    for info in listed:
        stem = info.base_name.removesuffix(".json")
        if stem.isdigit() and info.base_name.endswith(".json"):
            found.append((int(stem), info))
    return sorted(found, key=lambda pair: pair[0])


def _read_json(fs: pafs.FileSystem, path: str) -> dict[str, Any]:
    with fs.open_input_stream(path) as handle:
        entry: dict[str, Any] = json.loads(handle.read())
    return entry


def _manifest(fs: pafs.FileSystem, info: Any, cache: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest ``info`` lists, read once per write (``cache``: the write's own; a
    manifest never changes once written, and a write's few seconds see no prefix deleted and
    written anew)."""
    if cache is None:
        return _read_json(fs, info.path)
    entry = cache.get(info.path)
    if entry is None:
        entry = cache[info.path] = _read_json(fs, info.path)
    return entry


def committed(
    fs: pafs.FileSystem, root: str, cache: dict[str, Any] | None = None
) -> tuple[int, list[str]] | None:
    """The latest version and the files (relative to ``root``) a vane reader reads there;
    None if ``root`` has no log. ``cache``: manifests already read, by path."""
    log = versions(fs, root)
    return _state(fs, log, cache) if log else None


def _state(
    fs: pafs.FileSystem, log: list[tuple[int, Any]], cache: dict[str, Any] | None
) -> tuple[int, list[str]]:
    """The latest version of a non-empty ``log`` and the files a vane reader reads there."""
    files: list[str] = []
    for _, info in reversed(log):
        entry = _manifest(fs, info, cache)
        files = list(entry["files"]) + files
        if entry["mode"] == "overwrite":
            break
    return log[-1][0], list(dict.fromkeys(files))


@dataclass(frozen=True)
class Seen:
    """What a write's start saw of its prefix (after removing what dead writes left): the
    log's latest version and the files it shows (None: no log), the files listed, and the
    tokens of the writes live then (this one's included)."""

    version: int | None
    shown: frozenset[str] | None
    files: tuple[Any, ...]
    live: frozenset[str]

    def holds_data(self, root: str) -> bool:
        """Whether a reader found data here (``mode="error"``'s check at the start)."""
        if self.shown is not None:
            return bool(self.shown)
        return any(
            not _hidden_path(i.path, root) and owner(i.path, self.live) is None
            for i in self.files
            if not i.path[len(root) + 1 :].startswith((f"{LOG}/", f"{WRITES}/"))
        )


def roots_above(fs: pafs.FileSystem, path: str) -> list[str]:
    """The vane write roots (prefixes with a log, or a write in progress) that are ``path``
    or hold it, deepest first. Each prefix asks the store twice (its log, its writes): on a
    filesystem whose requests may run at once (HTTP, GCS, Azure, the Hub: fsspec's
    asynchronous ones) they all go at once, so a deep path waits for one answer, not for a
    dozen in turn."""
    candidates = _ancestors(path)
    probes = [(c, name) for c in candidates for name in (LOG, WRITES)]
    inner = fsspec_of(fs)

    def holds(probe: tuple[str, str]) -> bool:
        folder = f"{probe[0].rstrip('/')}/{probe[1]}"
        if inner is None:
            return bool(_list(fs, folder, recursive=False))
        # One request (pyarrow's handler asks whether it is a folder, then whether it exists:
        # two GETs over HTTP). Not there, or not ours to list (a public store that refuses
        # listings), is no root; any other failure is the read's.
        try:
            return bool(inner.ls(folder, detail=False))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return False
        except Exception as exc:
            if getattr(exc, "status", None) in (401, 403, 404, 410):
                return False
            raise

    if len(probes) > 2 and inner is not None and concurrent_requests(inner):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(probes), 16), thread_name_prefix="vane-probe") as pool:
            answers = list(pool.map(holds, probes))
    else:
        answers = [holds(p) for p in probes]
    found = {root for (root, _), held in zip(probes, answers, strict=True) if held}
    return [c for c in candidates if c in found]


def _ancestors(path: str) -> list[str]:
    """``path`` and the prefixes above it, deepest first; for a whole URL (an HTTP store's
    paths), none above its host."""
    scheme, sep, rest = path.partition("://")
    if not sep:
        rest = path
    parts = rest.strip("/").split("/")
    lead = f"{scheme}://" if sep else ("/" if path.startswith("/") else "")
    return [lead + "/".join(parts[:depth]) for depth in range(len(parts), 0, -1)]


def roots_in(listing: Iterable[str]) -> set[str]:
    """The write roots a recursive listing shows (paths with ``/_vane_log/`` or
    ``/_vane_writes/`` in them)."""
    found = set()
    for path in listing:
        for name in (LOG, WRITES):
            if f"/{name}/" in path:
                found.add(path.split(f"/{name}/", 1)[0])
    return found


def writing(fs: pafs.FileSystem, root: str) -> set[str]:
    """The tokens of the writes whose markers are under ``root`` (live, or dead and not yet
    cleaned): their files are not data until a manifest names them."""
    return {
        i.base_name.removesuffix(".json")
        for i in _list(fs, f"{root.rstrip('/')}/{WRITES}", recursive=False)
    }


def owner(path: str, tokens: Iterable[str]) -> str | None:
    """The token of the write that ``path`` belongs to, if any of ``tokens``."""
    name = os.path.basename(path)
    return next((t for t in tokens if t in name or f"/{t}/" in path), None)


@dataclass(frozen=True)
class _Marker:
    host: str
    pid: int
    started: float

    def dead(self) -> bool:
        if time.time() - self.started > STALE_WRITE_SECONDS:
            return True
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


class ObjectStaging:
    """One write to a prefix on an object store, from ``start`` to ``commit`` or ``abort``."""

    def __init__(self, destination: Location, mode: WriteMode, *, single_file: bool) -> None:
        if mode not in MODES:
            raise ConfigurationError(f"mode={mode!r} is not one of {', '.join(MODES)}")
        self.destination = destination
        self.mode = mode
        self.single_file = single_file
        self.token = uuid.uuid4().hex[:12]
        self.store = destination.store
        self.fs = destination.store.filesystem()
        self.shown = destination.url
        path = destination.path.rstrip("/")
        if single_file:
            self.root = path.rsplit("/", 1)[0]
            self.directory = f"{self.root}/{STAGING}/{self.token}"
        else:
            self.root = path
            self.directory = path
        self._marker = f"{self.root}/{WRITES}/{self.token}.json"
        self._committed = False
        self._committing: str | None = None  # the manifest being put: whether it took, ask
        self._manifests: dict[str, Any] = {}  # read once per write: they never change
        begun(self)  # before its marker exists: a Ctrl-C from here on finds it (commit.begun)
        try:
            with storage_errors(self.shown, "cannot write", destination.store):
                # what killed writes left, before anything of this one exists
                self._seen = self.clean()
                self._check()
                marker = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
                object_puts.put(self.store, self.fs, self._marker, json.dumps(marker).encode())
        except Exception:
            seen_through(self)  # refused, or its put failed: no marker to remove
            raise

    def _check(self) -> None:
        from pyarrow.fs import FileType

        if self.single_file:
            info = _info(self.fs, self.destination.path)
            if self.mode == "append":
                raise SinkError(
                    f"mode='append' adds files to a directory, but {self.shown!r} names a single "
                    "file. Write to a directory path instead, such as 's3://bucket/out/'"
                )
            if self.mode == "error" and info.type == FileType.File:
                raise SinkError(
                    f"{self.shown!r} already exists. Pass mode='overwrite' to replace it"
                )
            return
        if self.mode == "error" and self._seen.holds_data(self.root):
            raise SinkError(
                f"{self.shown!r} already exists. Pass mode='overwrite' to replace it, or "
                "mode='append' to add files to it"
            )

    def _holds_data(self, own: Iterable[str]) -> tuple[int, bool]:
        """The next version, and whether a reader finds data here now (other than this
        write's ``own`` files): one listing of the prefix (the log's manifests among its
        files: a log that appears after it is met by the conditional put), then, with no log,
        one of the markers."""
        listed = _list(self.fs, self.root)
        log = _versions_in(i for i in listed if i.path.rsplit("/", 1)[0] == f"{self.root}/{LOG}")
        if log:
            version, shown = _state(self.fs, log, self._manifests)
            return version + 1, bool(shown)
        mine = set(own)
        tokens = writing(self.fs, self.root) | {self.token}  # files of writes, not data yet
        return 0, any(
            not _hidden_path(i.path, self.root) and i.path not in mine
            for i in listed
            if owner(i.path, tokens) is None
        )

    def commit(self, files: list[str], rows: int) -> str:
        """Make the write's ``files`` (full paths on the store) what readers see, in one put.

        An overwrite, and an append to a prefix whose log the write's start saw, first try the
        version after the one seen then, without listing again: the conditional put refuses it
        if another write took it meanwhile, and the log is read again."""
        store = self.destination.store
        seen_through(self)  # from here the commit protocol answers for this write
        with storage_errors(self.shown, "cannot commit the write to", store):
            _pause("staged")
            if self.single_file:
                (staged,) = files
                if self.mode == "error" and _info(self.fs, self.destination.path).size is not None:
                    raise SinkError(f"{self.shown!r} appeared while writing; nothing was changed")
                self.fs.copy_file(staged, self.destination.path)
                self.abort()
                return self.destination.url
            relative = [f[len(self.root) + 1 :] for f in files]
            seen = self._seen.version
            guess = self.mode == "overwrite" or (self.mode == "append" and seen is not None)
            for attempt in range(_COMMIT_ATTEMPTS):
                mode = "append" if self.mode == "append" else "overwrite"
                names = relative
                if attempt == 0 and guess:
                    version = 0 if seen is None else seen + 1
                elif self.mode == "error":
                    version, holds = self._holds_data(files)
                    if holds:
                        raise SinkError(
                            f"{self.shown!r} appeared while writing; nothing was changed"
                        )
                else:
                    state = committed(self.fs, self.root, self._manifests)
                    version = 0 if state is None else state[0] + 1
                    if self.mode == "append" and state is None:
                        before = [
                            i.path[len(self.root) + 1 :]
                            for i in _list(self.fs, self.root)
                            if not _hidden_path(i.path, self.root) and i.path not in set(files)
                        ]
                        names, mode = before + relative, "overwrite"
                entry = {"write": self.token, "mode": mode, "files": names, "rows": rows}
                self._committing = self._version_path(version)
                if object_puts.create(store, self.fs, self._committing, entry):
                    break
                self._committing = None
            else:
                raise SinkError(
                    f"{self.shown!r}: {_COMMIT_ATTEMPTS} other writes committed while this one "
                    "tried to; nothing was changed"
                )
            self._committed = True
            _pause("committed")
        # Committed: tidying up may fail (the next write tidies) but never undoes the write.
        try:
            self._remove_marker()
            if self.mode == "overwrite":
                self._remove_replaced(set(files))
        except OSError:
            pass
        return self.destination.url

    def _version_path(self, version: int) -> str:
        return f"{self.root}/{LOG}/{version:0{_VERSION_DIGITS}d}.json"

    def clean(self) -> Seen:
        """Remove what no live write owns and no manifest shows: the parts and staging of
        dead writes (then their markers), and files an overwrite replaced; return what was
        seen.

        Files are listed first, then the markers, then the log: a write's marker is put before
        its first file, so every file listed belongs to a write whose marker the markers'
        listing sees, or to one that ended before it (committed: its manifest was put before
        its marker went, so the log's listing, made after, sees it; aborted: gone or dead).
        (With the log listed before the markers, a write committing between the two would
        have its files taken for garbage.)"""
        files = _list(self.fs, self.root)
        _pause("cleaning")
        live: set[str] = set()
        dead: list[Any] = []
        for info in _list(self.fs, f"{self.root}/{WRITES}", recursive=False):
            try:
                marker = _Marker(**_read_json(self.fs, info.path))
            except (OSError, ValueError, TypeError):
                marker = None  # being written this instant: alive
            if marker is not None and marker.dead():
                dead.append(info)
            else:
                live.add(info.base_name.removesuffix(".json"))
        gone = {info.base_name.removesuffix(".json") for info in dead}
        log = versions(self.fs, self.root)
        state = _state(self.fs, log, self._manifests) if log else None
        shown = None if state is None else {f"{self.root}/{f}" for f in state[1]}
        removed: set[str] = set()
        for info in files:
            path = info.path
            rest = path[len(self.root) + 1 :]
            if rest.startswith((f"{LOG}/", f"{WRITES}/")) or (shown and path in shown):
                continue  # a committed file, even of a writer killed before its tidying up
            token = owner(path, live | gone)
            if token in live:
                continue
            if token is None:
                if shown is None:
                    continue  # no log: data others wrote, not replaced by any vane write
                if _hidden_path(path, self.root):
                    continue  # someone else's hidden file (_SUCCESS, .crc): not ours
            removed.add(path)
        object_puts.delete(self.store, self.fs, sorted(removed))
        # last: until they go, a reader leaves the dead writes' files out
        object_puts.delete(self.store, self.fs, [info.path for info in dead])
        return Seen(
            None if state is None else state[0],
            frozenset(state[1]) if state is not None else None,
            tuple(i for i in files if i.path not in removed),
            frozenset(live | {self.token}),
        )

    def _remove_replaced(self, mine: set[str]) -> None:
        """After an overwrite: remove the files the write's start listed that it replaced,
        with no listing of its own. Those of writes live then stay (they may commit after this
        one), and files that came after that listing are not touched: the next write removes
        what is left."""
        replaced: list[str] = []
        for info in self._seen.files:
            path = info.path
            rest = path[len(self.root) + 1 :]
            if rest.startswith((f"{LOG}/", f"{WRITES}/")) or path in mine:
                continue
            if owner(path, self._seen.live) is not None or _hidden_path(path, self.root):
                continue
            replaced.append(path)
        object_puts.delete(self.store, self.fs, replaced)

    def _manifest_is_mine(self) -> bool:
        """Whether the manifest this write was putting is there, and this write's: the commit
        took, though an interrupt may have cut off the put's answer."""
        assert self._committing is not None
        try:
            with self.fs.open_input_stream(self._committing) as stream:
                return bool(json.loads(stream.read()).get("write") == self.token)
        except (OSError, ValueError):
            return False

    def _remove_marker(self) -> None:
        object_puts.delete(self.store, self.fs, [self._marker])

    def abort(self) -> None:
        """Remove this write's files and marker (an uncommitted write's are not read anyway,
        and what this cannot remove, the next write does)."""
        if self._committed or (self._committing is not None and self._manifest_is_mine()):
            self._committed = True  # a failure or a Ctrl-C after the commit: only tidy up
            with contextlib.suppress(OSError):  # (its marker names a live process: the next
                self._remove_marker()  # write would keep it while this process lives)
            seen_through(self)
            return
        object_puts.close_open(self.token)  # before the listing, which then finds them
        try:
            if self.single_file:
                mine = [i.path for i in _list(self.fs, self.directory)]
            else:
                mine = [i.path for i in _list(self.fs, self.root) if self.token in i.base_name]
            object_puts.delete(self.store, self.fs, mine)
        except OSError:
            pass
        self._remove_marker()
        seen_through(self)


def _hidden_path(path: str, root: str) -> bool:
    rest = path[len(root.rstrip("/")) + 1 :] if path.startswith(root) else path
    return any(part.startswith((".", "_")) for part in rest.split("/"))
