"""An error ledger's file: written beside a write's output and committed with it.

``write_*(..., errors_to=path)`` wraps the write's sink in a ``LedgeredSink``. Its write stages
the output as the sink always does and, once the last row is written (every step has run, so
the ledger is whole), stages the ledger as one Parquet file in a staging directory of its own
beside ``path`` (``commit.Staging``, the protocol every local write uses). The commit commits
the output first, then moves the ledger into place (one ``rename``). So:

- the write fails or is killed before its commit: both stagings are removed (by the abort, or
  by the next write to either path), and neither the output nor the ledger changes;
- the output's commit fails: the ledger is aborted too, and neither changes;
- the output is committed: the ledger follows in one rename, replacing the ledger of an earlier
  run. Only a kill in the instant between the output's commit and that rename leaves the new
  output with the old ledger (or none). So that such a ledger is never retried (its rows may be
  in the output already), a ledger of a local folder records the files the output holds once
  it is committed (those it held, for an append, and those this write adds), and a retry is
  refused when the output holds other files (``check_output``).

An empty ledger (no row failed) is still written, so a reader can rely on finding one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from vane.errors import LedgerError, SinkError
from vane.io.commit import Staging, abort_surely
from vane.io.files import is_uri
from vane.io.sinks import Committed, Sink

# The ledger's Parquet metadata key for the output it goes with: its path and files.
OUTPUT = b"vane.output"


def check_path(path: object, output: str, caller: str) -> str:
    """``errors_to`` as a local path a ledger can be written to, apart from the output."""
    if not isinstance(path, (str, Path)) or not str(path):
        raise LedgerError(
            f"{caller}(): errors_to must be a path such as 'errors.parquet', got {path!r}"
        )
    text = str(path)
    if is_uri(text):
        raise LedgerError(
            f"{caller}(errors_to={text!r}): the error ledger is written on this machine's disk in "
            "this version; pass a local path such as 'errors.parquet'"
        )
    where = Path(text).expanduser().absolute()
    if where.is_dir():
        raise LedgerError(
            f"{caller}(errors_to={text!r}) is a directory; the ledger is one Parquet file. "
            "Pass a file path such as 'errors.parquet'"
        )
    if not is_uri(output):
        target = Path(output).expanduser().absolute()
        if where == target or target in where.parents:
            raise LedgerError(
                f"{caller}(errors_to={text!r}) lies in the output {output!r}, where a reader "
                "would take it for output rows. Put the ledger beside the output instead"
            )
    return text


def output_files(destination: Path) -> list[str]:
    """The files of a local output folder, by their paths inside it (vane's own hidden files,
    such as a journal, left out), sorted."""
    if not destination.is_dir():
        return []
    found = []
    for root, directories, files in os.walk(destination):
        directories[:] = [d for d in directories if not d.startswith(".")]
        for name in files:
            if not name.startswith("."):
                found.append(os.path.relpath(os.path.join(root, name), destination))
    return sorted(found)


def recorded_output(table: pa.Table) -> tuple[str, tuple[str, ...]] | None:
    """The output a ledger goes with and the files it held once committed (None: a ledger of
    an output whose files are not recorded: an object store, a table format, one file)."""
    raw = (table.schema.metadata or {}).get(OUTPUT)
    if raw is None:
        return None
    output = json.loads(raw)
    return str(output["path"]), tuple(str(f) for f in output["files"])


def check_output(ledger: str, recorded: tuple[str, tuple[str, ...]], output: str) -> None:
    """A retry of ``ledger`` writes to the output it goes with, which holds the files it held
    when the ledger was committed: else the ledger may list rows the output holds already."""
    path, files = recorded
    target = Path(output).expanduser().absolute()
    if os.path.realpath(target) != os.path.realpath(path):
        raise LedgerError(
            f"the ledger {ledger!r} lists the rows that failed in a write to {path!r}, and this "
            f"write goes to {output!r}. Retry into the output the ledger goes with"
        )
    if tuple(output_files(target)) != files:
        raise LedgerError(
            f"the output {output!r} has changed since the ledger {ledger!r} was committed with "
            "it (another write committed there, or a write was killed between committing its "
            "output and its ledger), so the ledger may list rows the output holds now. Rerun "
            "the job with mode='overwrite' to write the output and its ledger afresh"
        )


def read(path: str, caller: str) -> pa.Table:
    """A ledger file's rows, with its metadata."""
    import pyarrow.parquet as pq

    where = Path(path).expanduser()
    if not where.is_file():
        raise LedgerError(
            f"{caller}({path!r}): there is no error ledger there. Pass the path a write was "
            "given as errors_to= (that write must have committed)"
        )
    try:
        return pq.read_table(where)
    except (OSError, pa.ArrowException) as exc:
        raise LedgerError(
            f"{caller}({path!r}) cannot be read as an error ledger: {exc}. Pass the path a "
            "write was given as errors_to="
        ) from exc


@dataclass(frozen=True)
class LedgeredSink:
    """``sink``, with the ledger ``rows()`` (called once every row is written) committed at
    ``path`` together with its output (see the module's text)."""

    sink: Sink
    ledger_path: str
    rows: Callable[[], pa.Table]

    @property
    def path(self) -> str:
        return self.sink.path

    @property
    def single_file(self) -> bool:
        return self.sink.single_file

    @property
    def format(self) -> str:
        return str(getattr(self.sink, "format", "table"))

    def check_schema(self, schema: pa.Schema) -> None:
        self.sink.check_schema(schema)

    def start(self) -> LedgeredWrite:
        write = self.sink.start()
        try:
            staging = Staging(
                Path(self.ledger_path).expanduser().absolute(), "overwrite", single_file=True
            )
        except BaseException:
            abort_surely(write.abort)
            raise
        return LedgeredWrite(write, staging, self.rows)


class LedgeredWrite:
    """The output's write and the ledger's staging, committed and aborted together."""

    def __init__(self, write: Any, staging: Staging, rows: Callable[[], pa.Table]) -> None:
        self.write = write
        self.staging = staging
        output = getattr(write, "staging", None)
        local = output if isinstance(output, Staging) else None
        self.writer = _LedgerWriter(write.writer, staging, rows, local)

    def commit(self, parts: list[Any]) -> Committed:
        try:
            committed: Committed = self.write.commit(parts)
        except BaseException:
            abort_surely(self.staging.abort)
            raise
        try:
            self.staging.commit()
        except SinkError as exc:
            raise SinkError(
                f"the output {committed.path!r} was committed, but its error ledger could not "
                f"be moved into {str(self.staging.shown)!r}: {exc.__cause__ or exc}. The ledger "
                "there is an earlier run's (or none), whose rows may be in the output now: "
                "rerun the job with mode='overwrite' to write the output and its ledger afresh"
            ) from exc
        return committed

    def abort(self) -> None:
        try:
            self.write.abort()
        finally:
            self.staging.abort()


@dataclass(frozen=True)
class _LedgerWriter:
    """The output's writer; after the last row, the ledger's file too."""

    writer: Any
    staging: Staging
    rows: Callable[[], pa.Table]
    output: Staging | None  # the output's staging, for a local folder of files

    def write(self, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> list[Any]:
        parts: list[Any] = self.writer.write(batches, schema)
        self.write_ledger(parts)
        return parts

    def write_ledger(self, parts: list[Any]) -> None:
        """The ledger's file, once the output's ``parts`` are written: by ``write``, or by a
        runner whose workers wrote the parts with the output's own writer (Ray's tasks)."""
        import pyarrow.parquet as pq

        table = self.rows()
        if self.output is not None and not self.output.single_file:
            # The files the output will hold once committed (see check_output).
            staged = self.output.directory
            files = {os.path.relpath(part.path, staged) for part in parts}
            if self.output.mode == "append":
                files |= set(output_files(self.output.destination))
            where = {"path": str(self.output.destination), "files": sorted(files)}
            metadata = {**(table.schema.metadata or {}), OUTPUT: json.dumps(where).encode()}
            table = table.replace_schema_metadata(metadata)
        name = self.staging.destination.name
        pq.write_table(table, self.staging.directory / name)
