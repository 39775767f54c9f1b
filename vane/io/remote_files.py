"""Resolving remote paths (a URL to an object, a prefix, a glob, or a list of them) into an
explicit, sorted list of objects to read, as ``files.resolve_files`` does on a local disk.

A prefix is listed recursively (names starting with ``.`` or ``_`` are not data, as locally);
a glob's ``*`` and ``?`` stay within one path segment and ``**`` crosses them. Where the listing
meets a vane write root (a prefix with a ``_vane_log``, see ``object_commit``), it reads what the
root's manifests name and nothing else there: no part of a write in progress or of a dead one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vane.errors import SourceNotFoundError
from vane.io import object_commit
from vane.io.storage import (
    HTTP,
    Location,
    Store,
    complete,
    http_info,
    locate,
    object_stamp,
    seen,
)
from vane.io.storage_errors import storage_errors

_GLOB_CHARS = re.compile(r"[*?\[]")
_HIVE = re.compile(r"^[^=/]+=[^=/]*$")
_HIVE_ESCAPE = re.compile(r"%3[dD]")


def _pattern(glob: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                out.append(re.escape("["))
                i += 1
            else:
                body = glob[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


@dataclass(frozen=True)
class Listed:
    """What ``resolve_remote`` found: the URLs of the objects to read, whether they sit in
    ``key=value`` prefixes below what was named, the store options they are read with (one
    store per read), and each object's stamp as the listing gave it (``readers.Stamp``: its
    size and time), so that nothing asks the store for them again."""

    files: list[str]
    hive: bool
    storage: tuple[tuple[str, Any], ...]
    stamps: dict[str, tuple[int, int, int, int]]


def resolve_remote(
    items: Sequence[str],
    extensions: tuple[str, ...],
    fmt: str,
    caller: str,
    storage_options: Mapping[str, Any] | None,
) -> Listed:
    """The objects ``items`` name (see ``Listed``)."""
    files: list[str] = []
    stamps: dict[str, tuple[int, int, int, int]] = {}
    hive = False
    options: tuple[tuple[str, Any], ...] | None = None
    roots: dict[str, list[str]] = {}  # the write roots above each prefix, asked once per read
    for item in items:
        where = locate(item, storage_options, caller)
        if options is None:
            options = where.store.options
        with storage_errors(item, f"{caller}(): cannot list", where.store):
            matched, base, infos, etags = _find(
                where, extensions, directory=item.endswith("/"), roots=roots
            )
        if not matched:
            _check_bucket(where, item, caller)
            raise SourceNotFoundError(
                f"{caller}(): {item!r} matches no {fmt} object (looked for names ending in "
                f"{', '.join(extensions)}). Check the path, and that the credentials may list it"
            )
        for path in matched:
            relative = path[len(base) :].strip("/").split("/")[:-1]
            hive = hive or any(_HIVE.match(part) for part in relative)
        files.extend(where.store.url(p) for p in matched)
        # Where the listing says each object's size and time (S3's does; an HTTP index page
        # does not), those are its stamp and what DuckDB is told of it.
        known = {p: i for p in matched if (i := infos.get(p)) is not None and complete(i)}
        stamps.update(
            (where.store.url(p), object_stamp(where.store, i, etags.get(i.path)))
            for p, i in known.items()
        )
        seen(where.store, list(known.values()), etags)
    return Listed(files, hive, options or (), stamps)


def _check_bucket(where: Location, item: str, caller: str) -> None:
    """A missing bucket is a ``StorageNotFoundError`` of its own (a listing of a bucket that
    does not exist comes back empty, as one of an empty prefix does)."""
    from pyarrow.fs import FileType

    if where.store.protocol != "s3":
        return
    bucket = where.path.split("/", 1)[0]
    with storage_errors(item, f"{caller}(): cannot list", where.store):
        missing = where.store.filesystem().get_file_info(bucket).type == FileType.NotFound
    if missing:
        from vane.io.storage_errors import translate

        raise translate(OSError("NoSuchBucket"), item, f"{caller}(): cannot read", where.store)


def _find(
    where: Location, extensions: tuple[str, ...], *, directory: bool, roots: dict[str, list[str]]
) -> tuple[list[str], str, dict[str, Any], dict[str, str]]:
    """The paths ``where`` names, the prefix hive directories are judged from, the listing's
    ``FileInfo`` of each path it listed, and their ETags (where the listing says them); a URL
    ending in "/" is a prefix to list even where the store answers for it as an object (an
    HTTP server's index page).

    On S3 a URL ending in "/" is listed straight away (pyarrow's asking first what it is
    costs a HEAD request and a listing of one key; a prefix with nothing under it lists as
    empty), and any other is asked as an object first (one HEAD request, which says its ETag),
    then listed as a prefix if there is no such object."""
    from pyarrow.fs import FileType

    fs = where.store.filesystem()
    path = where.path
    glob = _GLOB_CHARS.search(path)
    if glob is None:
        base = path.rstrip("/")
        s3 = where.store.protocol == "s3"
        if s3 and not directory and "/" in base:
            from vane.io import s3_objects

            heads, etags = s3_objects.head_objects(where.store, [base])  # and its ETag
            if heads:
                return _one(where.store, fs, path, heads[0], etags, known=roots)
        elif not s3:
            info, etags = _file_info(where.store, fs, base)
            if info.type == FileType.File and not directory:
                return _one(where.store, fs, path, info, etags, known=roots)
            if info.type == FileType.NotFound:
                return [], base, {}, {}
        pattern = None
    else:
        base = path[: glob.start()].rsplit("/", 1)[0]
        pattern = _pattern(path)
    for _attempt in range(_LISTING_ATTEMPTS):
        try:
            candidates, infos, etags = _candidates(where.store, fs, base, roots)
            break
        except _Committed:
            roots.clear()  # a first commit landed while listing: list again, under its log
            continue
    else:
        candidates, infos, etags = _candidates(where.store, fs, base, roots)
    matched = []
    for candidate in dict.fromkeys(candidates):
        relative = candidate[len(base) :].lstrip("/")
        if _hidden(relative):
            continue
        if pattern is not None and not pattern.match(candidate):
            continue
        if pattern is None and not candidate.endswith(extensions):
            continue
        matched.append(candidate)
    return sorted(matched), base, infos, etags


def _file_info(store: Store, fs: Any, path: str) -> tuple[Any, dict[str, str]]:
    """What ``path`` is, and its ETag where the answer says one (by path)."""
    if store.protocol not in HTTP:
        return fs.get_file_info(path), {}
    info, etag = http_info(store, path)
    return info, ({path: etag} if etag else {})


def _roots_above(store: Store, fs: Any, path: str, known: dict[str, list[str]]) -> list[str]:
    """``object_commit.roots_above``: on S3 one listing request per prefix, not two; and
    ``known`` to this read already (a list of URLs in one prefix asks it once)."""
    found = known.get(path)
    if found is None:
        if store.protocol == "s3":
            from vane.io import s3_objects

            folders = {object_commit.LOG, object_commit.WRITES}
            found = s3_objects.roots_above(store, path, folders)
        else:
            found = object_commit.roots_above(fs, path)
        known[path] = found
    return found


def _one(
    store: Store,
    fs: Any,
    path: str,
    info: Any,
    etags: dict[str, str],
    *,
    known: dict[str, list[str]],
) -> tuple[list[str], str, dict[str, Any], dict[str, str]]:
    """``_find``'s answer for the one object ``path`` (``info``): itself, unless it lies under
    a vane write root whose manifests do not name it."""
    parent = path.rsplit("/", 1)[0]
    roots = _roots_above(store, fs, parent, known)
    if roots:  # an object under a vane write root: read only if committed
        try:
            shown = _visible(fs, roots[0], [path])
        except _Committed:
            shown = _visible(fs, roots[0], [path])
        return ([path] if path in shown else []), parent, {path: info}, etags
    return [path], parent, {path: info}, etags


_LISTING_ATTEMPTS = 5


class _Committed(Exception):
    """A write root got its first manifest while it was being listed."""


def _candidates(
    store: Store, fs: Any, base: str, known: dict[str, list[str]]
) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """Every path a reader of ``base`` may read: outside vane write roots, what the listing
    found; inside one, what its manifests name (a listing could catch a commit half seen).
    And the listing's ``FileInfo`` of each path, and its ETag (S3's listing says them).

    Whether ``base`` itself is a write root, its recursive listing shows (a ``_vane_log/`` or
    ``_vane_writes/`` key right under it): only the prefixes above it are asked."""
    etags: dict[str, str] = {}
    if store.protocol == "s3":
        from vane.io import s3_objects

        listed, etags = s3_objects.list_objects(store, base)
        infos = {i.path: i for i in listed}
    else:
        infos = {i.path: i for i in object_commit._list(fs, base)}
    if base.startswith(("http://", "https://")):
        # An index page links "k=1/" as "k%3D1/": hive directories are read by their names.
        infos = {_HIVE_ESCAPE.sub("=", p): i for p, i in infos.items()}
    listing = list(infos)
    parent = base.rstrip("/").rsplit("/", 1)[0] if "/" in base.strip("/") else None
    above = _roots_above(store, fs, parent, known) if parent is not None else []
    roots = above + sorted(object_commit.roots_in(listing))
    inside = tuple(root.rstrip("/") + "/" for root in roots)
    candidates = [p for p in listing if not p.startswith(inside)]
    for root in roots:
        candidates.extend(
            p for p in _visible(fs, root, listing) if p.startswith(base.rstrip("/") + "/")
        )
    return candidates, infos, etags


def _visible(fs: Any, root: str, listing: list[str]) -> set[str]:
    """What a reader sees under ``root``: what its manifests name; before the first commit,
    the listed files that belong to no vane write (writes put their marker before their
    first file, so the markers are listed after the files)."""
    state = object_commit.committed(fs, root)
    if state is not None:
        return {f"{root}/{f}" for f in state[1]}
    tokens = object_commit.writing(fs, root)
    if object_commit.versions(fs, root):
        raise _Committed
    inside = root.rstrip("/") + "/"
    return {p for p in listing if p.startswith(inside) and object_commit.owner(p, tokens) is None}
