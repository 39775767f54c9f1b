"""Lance datasets (pylance): ``read_lance`` and ``write_lance``.

Reading: one version of the dataset (the latest when the relation is built, or the one asked
for) opened by each action as a ``LanceDataset``, which is a ``pyarrow.dataset.Dataset``:
DuckDB hands the columns it needs and the filters it can push (comparisons, ``IN``, ``IS
NULL``, ``AND``/``OR`` of them) to ``LanceDataset.scanner``, so Lance reads only those columns
and, with a scalar index, only those rows.

Writing, in Lance's own two steps:

    write   lance.fragment.write_fragments(stream): data files under <uri>/data/, referenced by
            no version yet (readers do not see them); returns their FragmentMetadata
    commit  LanceDataset.commit(uri, Append(fragments) | Overwrite(schema, fragments),
            read_version): one new manifest, written atomically (Lance's commit: a manifest
            file put if absent), which is the new version

A failure or a kill before the commit leaves the dataset at its previous version. Lance removes
the data files of a ``write_fragments`` that fails; ``abort`` removes those of a failed commit,
on a local disk or an object store (``RemoteLeftovers``), and a first write's that never
committed (the next write finds them); after a kill of a later write, or when one of several Ray
tasks fails, they stay, unreferenced, until Lance's ``cleanup_old_versions``. ``create`` refuses
an existing dataset, ``append`` adds a version (or creates the dataset), ``overwrite`` makes a
version holding only the new rows (the older versions stay readable by number). A vector index
(``vector_index=``) is built after the rows' commit, as a commit of its own: if it fails, the
rows are committed and the error says so.

Fragments can be written by workers (the Ray runner writes one per block) and committed
together by the driver: ``single_file`` is False.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from vane._deps import require
from vane.errors import ConfigurationError, SinkError, SourceError, VaneError
from vane.io.storage import Location
from vane.io.tables.base import (
    TablePart,
    check_mode,
    check_types,
    same_columns,
)
from vane.io.tables.options import library_options

MODES = ("create", "append", "overwrite")
# Lance tells on stderr that a dataset it creates did not exist; vane says what it did itself.
os.environ.setdefault("LANCE_LOG", "error")


def _lance() -> Any:
    return require("lance", extra="lance")


def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _local(uri: str) -> str:
    """A local path as Lance takes it: absolute, so a relative one means the same in workers."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return str(Path(uri).expanduser().absolute())


def _where(uri: str) -> str:
    return _local(uri) if _is_local(uri) else uri


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _open(uri: str, version: int | str | None, options: Mapping[str, str] | None) -> Any:
    lance = _lance()
    try:
        return lance.dataset(uri, version=version, storage_options=dict(options or {}) or None)
    except (ValueError, OSError, RuntimeError) as exc:
        raise SourceError(
            f"read_lance(): cannot open the Lance dataset {uri!r}"
            + (f" at version {version!r}" if version is not None else "")
            + f": {_first_line(exc)}. Check the path (a directory ending in .lance, as write_lance "
            "made it) and, for object stores, storage_options="
        ) from exc


@dataclass(frozen=True)
class LanceSource:
    """A Lance dataset at one version."""

    uri: str
    version: int
    storage_options: Mapping[str, str] | None = None

    @classmethod
    def at(
        cls, uri: str, version: int | str | None, storage_options: Mapping[str, str] | None
    ) -> LanceSource:
        """The dataset's version now (or ``version``), pinned: every action reads it."""
        uri = _where(uri)
        options = library_options("read_lance", uri, storage_options, "lance")
        dataset = _open(uri, version, options)
        return cls(uri, int(dataset.version), options)

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = _open(self.uri, self.version, self.storage_options).schema
        return schema

    def open(self) -> Any:
        return _open(self.uri, self.version, self.storage_options)

    def ray_dataset(self, ray_data: Any) -> Any:
        """The same version read by Ray tasks, a share of the fragments each (Ray Data's own
        ``read_lance``), for a plan that runs on Ray."""
        options = dict(self.storage_options or {}) or None
        return ray_data.read_lance(self.uri, version=self.version, storage_options=options)

    def describe(self) -> str:
        return f"ReadLance {self.uri} (version {self.version})"


# ---- writing ---------------------------------------------------------------------------------


def _refuse(kind: pa.DataType) -> str | None:
    """Lance holds every Arrow type a relation has, but not every nesting of them."""
    if pa.types.is_fixed_size_list(kind) and not _fixed_width(kind.value_type):
        # Lance 14 refuses lists, maps and dictionaries inside a fixed-size list, writes
        # structs there that it cannot read back, and panics on text or bytes there
        return (
            "Lance cannot hold: its fixed-size lists hold numbers, booleans, dates, times or "
            "fixed-size lists of them"
        )
    return None


def _fixed_width(kind: pa.DataType) -> bool:
    if pa.types.is_fixed_size_list(kind):
        return True
    try:
        return bool(kind.bit_width)
    except ValueError:  # text, bytes, lists, structs, maps, dictionaries
        return False


@dataclass(frozen=True)
class VectorIndex:
    """``write_lance(vector_index=...)``: the column, the distance and Lance's index options."""

    column: str
    metric: str = "l2"
    index_type: str = "IVF_PQ"
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, spec: Mapping[str, Any] | None) -> VectorIndex | None:
        if spec is None:
            return None
        if not isinstance(spec, Mapping) or not isinstance(spec.get("column"), str):
            raise ConfigurationError(
                "write_lance(): vector_index= takes a dict naming the column, such as "
                "{'column': 'embedding', 'metric': 'cosine', 'num_partitions': 16}"
            )
        rest = dict(spec)
        column = rest.pop("column")
        metric = str(rest.pop("metric", "l2")).lower()
        if metric not in ("l2", "cosine", "dot", "hamming"):
            raise ConfigurationError(
                f"write_lance(): vector_index metric={metric!r} is not one of 'l2', 'cosine', "
                "'dot', 'hamming'"
            )
        index_type = str(rest.pop("index_type", "IVF_PQ")).upper()
        return cls(column, metric, index_type, tuple(sorted(rest.items())))

    def check(self, schema: pa.Schema) -> None:
        if self.column not in schema.names:
            raise ConfigurationError(
                f"write_lance(): vector_index names {self.column!r}, which the relation does not "
                f"have; its columns are {', '.join(schema.names)}"
            )
        kind = schema.field(self.column).type
        if not (pa.types.is_fixed_size_list(kind) and pa.types.is_floating(kind.value_type)):
            raise ConfigurationError(
                f"write_lance(): a vector index needs a column of fixed-size float lists (such "
                f"as FLOAT[384]), and {self.column!r} is {kind}. Cast it first, for example "
                f"with_column({self.column!r}, '{self.column}::FLOAT[384]')"
            )

    def build(self, uri: str, storage_options: Mapping[str, str] | None) -> None:
        dataset = _open(uri, None, storage_options)
        # replace: an append rebuilds the index over every row, old and new
        settings: dict[str, Any] = {"replace": True, **dict(self.options)}
        try:
            dataset.create_index(self.column, self.index_type, metric=self.metric, **settings)
        except (ValueError, OSError, RuntimeError, TypeError) as exc:
            raise SinkError(
                f"write_lance(): the rows were committed to {uri!r} (version "
                f"{dataset.version}), and building the {self.index_type} index on "
                f"{self.column!r} failed: {exc}. Build it with "
                f"lance.dataset({uri!r}).create_index(...) once the options fit the data (IVF "
                "needs at least num_partitions rows, PQ at least 256)"
            ) from exc


@dataclass(frozen=True)
class LanceSink:
    """What ``write_lance`` was asked for."""

    uri: str
    mode: str = "create"
    max_rows_per_file: int | None = None
    data_storage_version: str | None = None
    storage_options: Mapping[str, str] | None = None
    vector_index: VectorIndex | None = None
    # An object-store destination as vane's storage layer reaches it (None: a local one), to
    # remove what a failed write left there (``RemoteLeftovers``).
    remote: RemoteLeftovers | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri:
            raise ConfigurationError(f"write_lance() needs a destination uri, got {self.uri!r}")
        check_mode("write_lance", self.mode, MODES)
        object.__setattr__(self, "uri", _where(self.uri))
        if not _is_local(self.uri):
            leftovers = RemoteLeftovers.at(self.uri, self.storage_options)
            object.__setattr__(self, "remote", leftovers)
        options = library_options("write_lance", self.uri, self.storage_options, "lance")
        object.__setattr__(self, "storage_options", options)
        rows = self.max_rows_per_file
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0):
            raise ConfigurationError(
                f"write_lance(): max_rows_per_file must be a positive integer, got {rows!r}"
            )

    @property
    def path(self) -> str:
        return self.uri

    @property
    def single_file(self) -> bool:
        return False  # fragments are written by any worker and committed together

    def check_schema(self, schema: pa.Schema) -> None:
        check_types("write_lance", schema, _refuse, _fix)
        if self.vector_index is not None:
            self.vector_index.check(schema)

    def start(self) -> LanceWrite:
        """Check the destination; note the version an append or overwrite builds on."""
        # An empty prefix on a store holds no dataset: one listing answers that, where Lance's
        # failing open of one would build its own client for it (a tenth of a second).
        empty = self.remote.empty() if self.remote is not None else False
        existing = None if empty else self._existing()
        if existing is not None and self.mode == "create":
            raise SinkError(
                f"write_lance(): {self.uri!r} already holds a Lance dataset (version "
                f"{existing.version}); mode='create' makes a new one. Pass mode='append' to add "
                "rows or mode='overwrite' to replace them"
            )
        read_version = None if existing is None else int(existing.version)
        schema = None if existing is None else existing.schema
        writer = FragmentWriter(
            self.uri,
            self.max_rows_per_file,
            self.data_storage_version,
            self.storage_options,
            schema if self.mode == "append" else None,
        )
        if self.remote is not None:
            created = existing is None and (empty or self.remote.empty())
        else:
            created = not (Path(self.uri).exists() and any(Path(self.uri).iterdir()))
        return LanceWrite(self, writer, read_version, schema, created=created)

    def _existing(self) -> Any:
        lance = _lance()
        try:
            return lance.dataset(self.uri, storage_options=self.storage_options)
        except (ValueError, OSError, RuntimeError):
            if self.remote is not None and self.remote.clear_failed_create():
                return None  # as for a local path, below
            if _is_local(self.uri) and _failed_create(Path(self.uri)):
                # A first write that died before its commit (a kill): its data files, never
                # part of any version. They go, as the next write's own would on failure.
                shutil.rmtree(self.uri, ignore_errors=True)
                return None
            if _is_local(self.uri) and Path(self.uri).exists() and any(Path(self.uri).iterdir()):
                raise SinkError(
                    f"write_lance(): {self.uri!r} exists and is not a Lance dataset; choose "
                    "another path"
                ) from None
            return None


def _failed_create(path: Path) -> bool:
    """``path`` holds only what a first write that never committed leaves: a ``data`` folder
    of ``.lance`` files and of the ``.tmp*`` files Lance writes each one as before renaming it
    (a kill mid-file), perhaps the commit's transaction file, and no version's manifest (a kill
    before the commit's last step)."""
    if not path.is_dir():
        return False
    entries = {entry.name for entry in path.iterdir()}
    if "data" not in entries or not entries <= {"data", "_transactions", "_versions"}:
        return False
    if any((path / "_versions").glob("*.manifest")):
        return False
    return all(f.suffix == ".lance" or f.name.startswith(".tmp") for f in (path / "data").iterdir())


def _fix(column: str) -> str:
    return (
        f"Turn it into a type Lance holds first: a list of any length, for example "
        f"with_column({column!r}, '{column}::VARCHAR[][]'), or JSON text with "
        f"with_column({column!r}, 'to_json({column})::VARCHAR')"
    )


@dataclass(frozen=True)
class RemoteLeftovers:
    """A Lance dataset's prefix on an object store, through vane's storage layer: what a write
    that failed before or at its commit left there goes, as on a local disk. Best effort: a
    store that refuses leaves unreferenced files (Lance's ``cleanup_old_versions`` removes them
    later), never an error over the write's own."""

    location: Location

    @classmethod
    def at(cls, uri: str, given: Mapping[str, Any] | None) -> RemoteLeftovers | None:
        from vane.io.storage import is_s3_option, locate, protocol_of

        # Lance's own option names (allow_http, aws_*) are not the storage layer's.
        ours = {k: v for k, v in (given or {}).items() if is_s3_option(k)}
        if protocol_of(uri) not in ("s3", "s3a"):
            ours = dict(given or {})
        try:
            return cls(locate(uri, ours, "write_lance"))
        except VaneError:
            return None  # a store vane cannot reach itself: Lance's own cleanup only

    def _listed(self) -> list[str] | None:
        """The keys below the prefix, relative to it (None: it could not be listed)."""
        from pyarrow.fs import FileSelector, FileType

        try:
            fs = self.location.store.filesystem()
            found = fs.get_file_info(
                FileSelector(self.location.path, recursive=True, allow_not_found=True)
            )
        except (OSError, VaneError):
            return None
        base = self.location.path.rstrip("/") + "/"
        return [i.path[len(base) :] for i in found if i.type == FileType.File]

    def empty(self) -> bool:
        return self._listed() == []

    def clear_failed_create(self) -> bool:
        """Remove what a first write that never committed left (as ``_failed_create`` tells
        for a local path): only data files, transactions and no version's manifest. Whether
        there was such a leftover."""
        keys = self._listed()
        if not keys:
            return False
        tops = {key.split("/", 1)[0] for key in keys}
        manifests = any(k.startswith("_versions/") and k.endswith(".manifest") for k in keys)
        if "data" not in tops or not tops <= {"data", "_transactions", "_versions"} or manifests:
            return False
        self._delete(keys)
        return True

    def remove(self, data_files: list[str], *, whole: bool) -> None:
        """Remove ``data_files`` (paths under ``data/``), or everything when the write made
        the dataset (``whole``) and no version of it was committed (a prefix that cannot be
        listed is left as it is but for ``data_files``)."""
        keys = self._listed() if whole else None
        if keys is not None and not any(k.startswith("_versions/") for k in keys):
            self._delete(keys)
        else:
            self._delete([f"data/{name}" for name in data_files])

    def _delete(self, keys: list[str]) -> None:
        """Remove ``keys`` (relative to the prefix) in batched requests, best effort."""
        from vane.io import object_puts

        with contextlib.suppress(OSError, VaneError):
            paths = [self.location.join(key).path for key in keys]
            object_puts.delete(self.location.store, self.location.store.filesystem(), paths)


@dataclass(frozen=True)
class FragmentWriter:
    """Writes a stream of batches as Lance fragments that no version references yet; picklable,
    so a worker can write its share."""

    uri: str
    max_rows_per_file: int | None
    data_storage_version: str | None
    storage_options: Mapping[str, str] | None
    appending_to: pa.Schema | None = None  # an append's rows must have the table's columns

    def write(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, worker: str | None = None
    ) -> list[TablePart]:
        from lance.fragment import write_fragments

        if self.appending_to is not None:
            same_columns("write_lance", repr(self.uri), self.appending_to, schema)
        reader = pa.RecordBatchReader.from_batches(schema, iter(batches))
        options: dict[str, Any] = {}
        if self.max_rows_per_file is not None:
            options["max_rows_per_file"] = self.max_rows_per_file
        if self.data_storage_version is not None:
            options["data_storage_version"] = self.data_storage_version
        try:
            fragments = write_fragments(
                reader,
                self.uri,
                schema=schema,
                storage_options=dict(self.storage_options or {}) or None,
                **options,
            )
        except VaneError:
            raise
        except BaseException as exc:
            # Lance's errors (OSError, ValueError, a Rust panic: a BaseException), or the
            # stream's own failure through them: the runner re-raises the stream's original
            if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                raise  # KeyboardInterrupt, SystemExit
            raise SinkError(
                f"write_lance(): writing {self.uri!r} failed: {_first_line(exc)}. Nothing was "
                "committed: the dataset is at its previous version"
            ) from exc
        parts = [
            TablePart(
                rows=int(f.physical_rows),
                files=len(f.files),
                bytes=sum(int(d.file_size_bytes or 0) for d in f.files),
                schema=schema,
                payload=f,
            )
            for f in fragments
        ]
        return parts or [TablePart(0, 0, 0, schema)]


class LanceWrite:
    """One ``write_lance`` in progress (held by the driver)."""

    def __init__(
        self,
        sink: LanceSink,
        writer: FragmentWriter,
        read_version: int | None,
        table_schema: pa.Schema | None,
        *,
        created: bool = False,
    ) -> None:
        self.sink = sink
        self.created = created  # the destination did not exist: a failure removes it whole
        self.writer = writer
        self.read_version = read_version
        self.table_schema = table_schema
        self._parts: list[TablePart] = []
        self._committing = False  # Lance's commit was called: whether it took, Lance knows
        self.committed = False

    def commit(self, parts: list[TablePart]) -> Any:
        from vane.io.sinks import Committed

        lance = _lance()
        self._parts = parts
        fragments = [p.payload for p in parts if p.payload is not None]
        schema = parts[0].schema if parts else self.table_schema
        if schema is None:
            raise SinkError(
                f"write_lance(): no rows and no schema reached the commit of {self.sink.uri!r}; "
                "nothing was written"
            )
        if self.sink.mode == "append" and self.read_version is not None:
            operation = lance.LanceOperation.Append(fragments)
        else:
            operation = lance.LanceOperation.Overwrite(schema, fragments)
        self._committing = True
        try:
            lance.LanceDataset.commit(
                self.sink.uri,
                operation,
                read_version=self.read_version,
                storage_options=self.sink.storage_options,
            )
            self.committed = True
        except (ValueError, OSError, RuntimeError) as exc:
            self.abort()
            raise SinkError(
                f"write_lance(): committing {self.sink.uri!r} failed: {exc}. The dataset is at "
                "its previous version (another writer may have committed meanwhile: write "
                "again)"
            ) from exc
        if self.sink.vector_index is not None:
            self.sink.vector_index.build(self.sink.uri, self.sink.storage_options)
        return Committed(
            self.sink.uri,
            sum(p.rows for p in parts),
            sum(p.files for p in parts),
            sum(p.bytes for p in parts),
        )

    def abort(self) -> None:
        """Remove the data files of fragments this write made (the committed versions never
        reference them), on a local disk or an object store; once committed, nothing: a
        failure after the commit (a vector index that could not be built, a Ctrl-C as Lance's
        commit returned) leaves the committed rows, whose files these are."""
        if self.committed or (self._committing and self._holds_mine()):
            self.committed = True
            return
        remote = self.sink.remote
        if remote is not None:
            files = [f.path for p in self._parts if p.payload is not None for f in p.payload.files]
            remote.remove(files, whole=self.created)
            return
        if self.created and not (Path(self.sink.uri) / "_versions").exists():
            shutil.rmtree(self.sink.uri, ignore_errors=True)  # no version was ever committed
            return
        data = Path(self.sink.uri) / "data"
        for part in self._parts:
            for file in part.payload.files if part.payload is not None else ():
                (data / file.path).unlink(missing_ok=True)

    def _holds_mine(self) -> bool:
        """Whether the dataset's latest version holds a fragment this write made: its commit
        took (asked of Lance, for a commit whose return an interrupt may have cut off)."""
        mine = {f.path for p in self._parts if p.payload is not None for f in p.payload.files}
        try:
            dataset = _open(self.sink.uri, None, self.sink.storage_options)
        except SourceError:
            return False  # no dataset: no version holds them
        if self.read_version is not None and dataset.version <= self.read_version:
            return False
        return any(f.path in mine for frag in dataset.get_fragments() for f in frag.metadata.files)
