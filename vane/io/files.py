"""Resolving what a user passes to ``read_*`` (a file, a directory, a glob, or a list of them)
into an explicit, sorted list of files, so that a typo is a clear error at the source and the
engine reads exactly the files that were found."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from vane.errors import ConfigurationError, SourceNotFoundError
from vane.io.commit import list_consistently

FileFormat = Literal["parquet", "csv", "json"]
PathLike: TypeAlias = "str | os.PathLike[str]"
Paths: TypeAlias = "PathLike | Sequence[PathLike]"

EXTENSIONS: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".parq", ".pq"),
    "csv": (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".csv.zst"),
    "json": (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz"),
}
# What the other sources list: read_images what Pillow decodes (upper case too: cameras write
# .JPG), from_glob_path every file. Not table formats, so not in EXTENSIONS, which the writers
# and the CLI read as the formats vane writes.
LISTED: dict[str, tuple[str, ...]] = EXTENSIONS | {
    "image": tuple(
        e
        for ext in (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp")
        for e in (ext, ext.upper())
    ),
    "file": ("",),
}
# A destination path ending in one of these is written as one file (compressed suffixes are not
# offered: the writers do not compress CSV or JSON).
SINGLE_FILE_SUFFIXES: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".parq", ".pq"),
    "csv": (".csv",),
    "json": (".json", ".jsonl", ".ndjson"),
}
_GLOB_CHARS = re.compile(r"[*?\[]")
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_HIVE_DIR = re.compile(r"^[^=]+=[^=]*$")


def is_uri(path: str) -> bool:
    """True for ``s3://...``-style paths, which are handed to the engine unchanged."""
    return bool(_URI.match(path)) and not path.startswith("file://")


def _hidden(name: str) -> bool:
    # Dot files, our own staging directories, and markers such as _SUCCESS are not data.
    return name.startswith((".", "_"))


def _walk(directory: Path, extensions: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        found.extend(
            os.path.join(root, f) for f in files if not _hidden(f) and f.endswith(extensions)
        )
    return sorted(found)


@dataclass(frozen=True)
class _Found:
    """What one path the user gave names: the files it matched, where to judge hive
    directories from, and the directories the listing looked in."""

    matched: list[str]
    base: Path
    places: list[str]
    kind: Literal["glob", "directory", "file", "missing"]


def _find(text: str, path: Path, fmt: str) -> _Found:
    # A path that exists is read as itself, even if its name holds glob characters
    # (`x[1].parquet`); only a path that does not exist is a glob.
    if _GLOB_CHARS.search(text) and not path.exists():
        matched = sorted(
            p
            for p in glob.glob(str(path), recursive=True)
            if os.path.isfile(p) and not _hidden(os.path.basename(p))
        )
        prefix = _GLOB_CHARS.split(str(path), maxsplit=1)[0]  # before the first glob character
        root = _existing(Path(prefix if prefix.endswith(os.sep) else os.path.dirname(prefix)))
        base = Path(prefix).parent
        return _Found(matched, base, [root, *_directories(matched)], "glob")
    if path.is_dir():
        directory = Path(os.path.abspath(path))
        matched = _walk(directory, LISTED[fmt])
        return _Found(matched, directory, [str(directory), *_directories(matched)], "directory")
    if path.is_file():
        return _Found([str(path)], path.parent, [os.path.dirname(os.path.realpath(path))], "file")
    return _Found([], path.parent, [_existing(path)], "missing")


def _directories(files: list[str]) -> list[str]:
    return sorted({os.path.dirname(os.path.abspath(f)) for f in files})


def _existing(path: Path) -> str:
    """The deepest directory of ``path`` that exists (a path not there yet may appear when a
    dead writer's append is finished)."""
    path = Path(os.path.abspath(path))
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return str(path)


@dataclass(frozen=True)
class Resolved:
    """What ``resolve_files`` found: the files (local paths or URLs), a short label for
    ``explain()``, whether they sit in hive-style ``key=value`` directories below what the
    user named, and for URLs the store options they are read with."""

    files: tuple[str, ...]
    label: str
    hive: bool
    storage: tuple[tuple[str, Any], ...] | None = None
    # Remote objects' stamps as their listing gave them (``readers.Stamp``); None for local
    # files, which a scan stats itself.
    stamps: dict[str, tuple[int, int, int, int]] | None = None


def resolve_files(
    paths: Paths, fmt: str, caller: str, storage_options: Mapping[str, Any] | None = None
) -> Resolved:
    """The files to read (see ``Resolved``). Remote paths (``s3://``...) are resolved by
    ``remote_files``; a read takes local paths or remote ones, not both.

    Every path is listed under vane's commit protocol (``commit.list_consistently``), a
    directory, a glob and a file alike: no listing sees part of an append, live or left by a
    writer that died."""
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, Sequence) and paths:
        items = list(paths)
    else:
        raise ConfigurationError(
            f"{caller}() needs a path, a directory, a glob or a non-empty list of them, "
            f"got {paths!r}"
        )
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise ConfigurationError(f"{caller}(): paths must be strings, got {item!r}")
    label = ", ".join(os.fspath(i) for i in items[:3]) + (", ..." if len(items) > 3 else "")
    remote = [is_uri(os.fspath(i)) for i in items]
    if any(remote):
        if not all(remote) or len({os.fspath(i).split("://", 1)[0] for i in items}) > 1:
            raise ConfigurationError(
                f"{caller}(): one read takes local paths or URLs of one protocol, not both; "
                "read them separately and combine them with union()"
            )
        from vane.io.remote_files import resolve_remote

        urls = [os.fspath(i) for i in items]
        listed = resolve_remote(urls, LISTED[fmt], fmt, caller, storage_options)
        return Resolved(tuple(listed.files), label, listed.hive, listed.storage, listed.stamps)
    if storage_options:
        raise ConfigurationError(
            f"{caller}(): storage_options apply to remote paths (s3://...), and {label!r} is local"
        )
    given: list[tuple[str, Path]] = []
    for item in items:
        text = os.fspath(item).removeprefix("file://")
        given.append((text, Path(text).expanduser()))
    found, unfinished = list_consistently(
        lambda: [_find(text, path, fmt) for text, path in given],
        lambda listing: [place for one in listing for place in one.places],
        start=[_existing(path) for _, path in given],
    )
    files: list[str] = []
    hive = False
    for (text, _), one in zip(given, found, strict=True):
        if one.kind == "missing":
            raise SourceNotFoundError(f"{caller}(): {text!r} does not exist")
        matched = one.matched
        if unfinished:  # appends vane could not finish: none of their files
            matched = [m for m in matched if os.path.realpath(m) not in unfinished]
        if not matched:
            what = "directory" if one.kind == "directory" else "glob"
            looked = (
                f"{fmt} files (looked for names ending in {', '.join(LISTED[fmt])})"
                if any(LISTED[fmt])
                else "files"
            )
            raise SourceNotFoundError(f"{caller}(): the {what} {text!r} holds no {looked}")
        hive = hive or any(  # each distinct directory once: a folder may hold many files
            any(_HIVE_DIR.match(part) for part in Path(d).relative_to(one.base).parts)
            for d in {os.path.dirname(m) for m in matched}
            if Path(d).is_relative_to(one.base)
        )
        files.extend(os.path.abspath(m) for m in matched)
    return Resolved(tuple(files), label, hive)
