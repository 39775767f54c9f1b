"""Source nodes: files, Arrow tables and streams, materialized results, ranges."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from vane._text import counted
from vane.errors import SourceError
from vane.io import readers
from vane.io.files import FileFormat
from vane.io.spool import Spool
from vane.io.tables.base import TableSource
from vane.plan.nodes.base import PlanNode

# --------------------------------------------------------------------------------------------
# Sources


class Source(PlanNode):
    """A node that produces data; it has no plan inputs. The backend reads it
    (``vane/backend/compile.py``, ``scan``)."""


@dataclass(frozen=True, eq=False)
class FileScan(Source):
    """Files of one format, already resolved to a list of paths by the io layer; ``options``
    are DuckDB's reader parameters (``io/readers.py``), ``columns`` the ones to keep, ``stamps``
    each file's identity when it was listed (taken here unless given).

    An action reads the files it was built on or fails: a file gone or replaced since (by
    another write, an overwrite of the same name included) is a ``SourceError`` saying so,
    never rows of another file read under this schema."""

    format: FileFormat
    files: tuple[str, ...]
    label: str
    options: tuple[tuple[str, object], ...] = ()
    columns: tuple[str, ...] | None = None
    stamps: Mapping[str, readers.Stamp] | None = None
    # Remote files (URLs): their store's options (io/storage.py); None for local files.
    storage: readers.Storage = None

    def __post_init__(self) -> None:
        if not self.files:
            raise SourceError(f"no {self.format} files to read for {self.label!r}")
        if self.stamps is None:
            # Before anything is read: a file replaced from here on differs from its stamp.
            object.__setattr__(self, "stamps", readers.stamps(self.files, self.storage))
        stamps = self.stamps or {}
        options = dict(self.options)
        restore: dict[str, pa.DataType] = {}
        differing = None  # Parquet files' stored schemas, where they differ
        rows = None  # the files' rows, where their footers say
        if self.format == "parquet":
            footers = (
                readers.parquet_footers(self.files)
                if self.storage is None
                else readers.parquet_footers(
                    self.files,
                    self.storage,
                    [stamps[f][2] if f in stamps else None for f in self.files],
                )
            )
            if footers is not None:
                schemas = [footer.schema for footer in footers]
                rows = sum(footer.rows for footer in footers)
                readers.check_names(self.files, schemas)
                restore = readers.fixed_size_columns(schemas)
                if any(not s.equals(schemas[0], check_metadata=False) for s in schemas[1:]):
                    options.setdefault("union_by_name", True)
                    differing = schemas
        elif len(self.files) > 1:
            options.setdefault("union_by_name", True)  # files are combined by column name
        object.__setattr__(self, "options", tuple(sorted(options.items())))
        object.__setattr__(self, "_restore", restore)
        object.__setattr__(self, "_differing", differing)
        object.__setattr__(self, "_rows", rows)
        self._bind()  # reads the files' headers (their footers are read above)
        self._check_ragged_csv()
        if self.storage is None:
            changed = self.vanished()  # replaced while it was being read: say so now
            if changed is not None:
                raise changed
        # Objects are not listed again here: a listing is a request, and every action lists
        # them before it reads (``vanished``), so one replaced meanwhile fails that action.

    @property
    def rows(self) -> int | None:
        """The rows the files hold, when that is known without reading them (Parquet footers;
        a file replaced since fails the action that reads it, so the count holds)."""
        rows: int | None = self.__dict__["_rows"]
        return rows

    @property
    def restore(self) -> dict[str, pa.DataType]:
        """Columns the Parquet footers declare fixed-size lists, which DuckDB reads as lists:
        the scan casts them back."""
        restore: dict[str, pa.DataType] = self.__dict__["_restore"]
        return restore

    @property
    def differing(self) -> list[pa.Schema] | None:
        """The Parquet files' stored schemas, where they differ (None where they agree)."""
        differing: list[pa.Schema] | None = self.__dict__["_differing"]
        return differing

    def _check_ragged_csv(self) -> None:
        """DuckDB reads a CSV whose rows have different numbers of fields as one text column
        named by the whole header: say so, with the fixes, instead of returning that."""
        names = self.schema.names
        given = dict(self.options)
        if self.format != "csv" or len(names) != 1 or "delim" in given or "null_padding" in given:
            return
        separators = [c for c in ",;\t|" if c in names[0]]
        if separators:
            raise SourceError(
                f"`{self.describe()}`: the header {names[0]!r} looks like several columns, but "
                "DuckDB could not find one delimiter that fits every row (rows with different "
                "numbers of fields?). Pass null_padding=True to read missing fields as nulls, "
                f"or delimiter={separators[0]!r} to say what separates the fields"
            )

    def describe(self) -> str:
        count = len(self.files)
        return f"Read{self.format.capitalize()} {self.label} ({count} file{'s' * (count != 1)})"

    def vanished(self, files: Sequence[str] | None = None) -> SourceError | None:
        """If files listed when the relation was built (or those of ``files``) are gone or
        were replaced since (another write), the error that says so; None if they are all as
        they were. Objects are listed to know (which also tells this process's DuckDB what
        they are, so that it asks nothing more before it reads them)."""
        stamps = self.stamps or {}
        files = self.files if files is None else files
        gone: list[str] = []
        replaced: list[str] = []
        current = readers.stamps(files, self.storage) if self.storage is not None else None
        for path in files:
            try:
                now = current[path] if current is not None else readers.stamp(os.stat(path))
            except (OSError, KeyError):
                gone.append(path)
                continue
            if stamps.get(path, now) != now:
                replaced.append(path)
        if gone:
            return self.changed(
                f"{gone[0]!r}"
                + (f" and {counted(len(gone) - 1, 'other file')}" if len(gone) > 1 else "")
                + (" no longer exist" if len(gone) > 1 else " no longer exists")
            )
        if replaced:
            return self.changed(
                f"{replaced[0]!r}"
                + (f" and {counted(len(replaced) - 1, 'other file')}" if len(replaced) > 1 else "")
                + " changed since the relation was built"
            )
        return None

    def changed(self, what: str) -> SourceError:
        return SourceError(
            f"`{self.describe()}`: {what}: the files changed since they were listed (another "
            f"write replaced them?). Build the relation again, e.g. "
            f"vane.read_{self.format}({self.label!r}), to read what is there now"
        )


@dataclass(frozen=True, eq=False)
class ArrowScan(Source):
    """An in-memory Arrow table; it can be read any number of times."""

    table: pa.Table

    def __post_init__(self) -> None:
        self._set_schema(self.table.schema)

    def describe(self) -> str:
        return f"FromArrow rows={self.table.num_rows}"


@dataclass(frozen=True, eq=False)
class LedgerScan(ArrowScan):
    """The rows of an error ledger that ``retry_failed`` runs again: an in-memory table like any
    other, which also says which ledger it came from (a write of it must replace that ledger
    in its commit, so no row is retried twice) and each UDF step's name in the pipeline that
    wrote the ledger, by step id (the retried steps keep their names, and their key columns, in
    the new ledger)."""

    ledger: str = ""
    labels: tuple[tuple[int, str], ...] = ()
    # Each step's key columns in that ledger, by name: the retry's own ledger keeps the same.
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The output the ledger goes with and the files it held then (None: not recorded).
    output: tuple[str, tuple[str, ...]] | None = None

    def describe(self) -> str:
        return f"FromErrorLedger {self.ledger!r} rows={self.table.num_rows}"


# The most of a stream a probe keeps (``ArrowStreamScan.peeked``): past it, the probe's read
# of the stream ends there, as if the stream did (a probe needs its first rows only; on the Ray
# runner a read of the stream would otherwise take all of it).
PEEK_BYTES = 64 * 2**20


@dataclass(frozen=True, eq=False)
class ArrowStreamScan(Source):
    """A ``RecordBatchReader``: streamed lazily, so it can be read by one action only. What a
    probe reads of it first (a UDF step learning its output schema from its first rows:
    ``peeked``) is kept, up to ``PEEK_BYTES``, and given again to the action that reads it."""

    reader: pa.RecordBatchReader
    _state: dict[str, Any] = field(
        default_factory=lambda: {
            "consumed": False,
            "peeking": 0,  # probes under way (one may run inside another)
            "kept": [],
            "kept_bytes": 0,
            "lock": threading.Lock(),  # (DuckDB and Ray read a stream on threads of theirs)
        },
        repr=False,
    )

    def __post_init__(self) -> None:
        self._set_schema(self.reader.schema)

    def take_reader(self) -> pa.RecordBatchReader:
        """The reader, for the one action that reads it (or for a probe: see ``peeked``)."""
        state = self._state
        if state["consumed"]:
            raise SourceError(
                "this relation reads a pyarrow RecordBatchReader, which can be read once, and an "
                "earlier action already read it. Pass a pa.Table to vane.from_arrow to read the "
                "data several times, or build the relation again from a new reader"
            )
        if state["peeking"]:
            return pa.RecordBatchReader.from_batches(self.schema, self._keeping())
        state["consumed"] = True
        if not state["kept"]:
            return self.reader
        return pa.RecordBatchReader.from_batches(self.schema, self._replaying())

    def _keeping(self) -> Iterator[pa.RecordBatch]:
        state = self._state
        kept: list[pa.RecordBatch] = state["kept"]
        index = 0
        while True:
            with state["lock"]:
                if index == len(kept):
                    if state["kept_bytes"] >= PEEK_BYTES:
                        return  # enough for a probe: it sees the stream end here
                    batch = next(self.reader, None)
                    if batch is None:
                        return
                    kept.append(batch)
                    state["kept_bytes"] += batch.nbytes
                batch = kept[index]
            index += 1
            yield batch

    def _replaying(self) -> Iterator[pa.RecordBatch]:
        kept: list[pa.RecordBatch] = self._state["kept"]
        while True:
            with self._state["lock"]:
                if not kept:
                    break
                batch = kept.pop(0)  # let go of each as it is given
            yield batch
        yield from self.reader

    @contextmanager
    def peeked(self) -> Iterator[None]:
        """While the block runs, actions read this stream without using it up: what they read
        is kept, for the action that reads it for real."""
        self._state["peeking"] += 1
        try:
            yield
        finally:
            self._state["peeking"] -= 1

    def describe(self) -> str:
        return "FromArrowStream (readable once)"


@dataclass(frozen=True, eq=False)
class TableScan(Source):
    """A table format's table at one version (``vane.io.tables``): each action opens it anew, as
    a dataset DuckDB scans with projection and filter pushdown, or a stream the format's scanner
    narrowed already."""

    table: TableSource

    def __post_init__(self) -> None:
        self._bind()  # the schema as the backend gives it back, found without reading a row

    def describe(self) -> str:
        return self.table.describe()


@dataclass(frozen=True, eq=False)
class MaterializedScan(Source):
    """A result computed once and kept (``Relation.materialize()``): read any number of times."""

    spool: Spool

    def __post_init__(self) -> None:
        self._set_schema(self.spool.schema)

    def describe(self) -> str:
        return f"Materialized ({self.spool.describe()})"


@dataclass(frozen=True, eq=False)
class RangeScan(Source):
    """``BIGINT`` ids ``0 .. n-1`` in a column ``id``."""

    n: int

    def __post_init__(self) -> None:
        self._set_schema(pa.schema([pa.field("id", pa.int64())]))

    def describe(self) -> str:
        return f"Range n={self.n}"
