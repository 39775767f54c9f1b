"""The writes: each streams the relation's rows into one sink, committed all at once (files
under a path, on a disk or an object store, or a table format's new version)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from vane._arguments import checked
from vane.errors import ConfigurationError
from vane.execution.runner import current_runner
from vane.io.commit import WriteMode
from vane.relation.base import RelationBase
from vane.relation.verbs import _as_tuple

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

    from vane.io.files import FileFormat
    from vane.io.resume import Resume
    from vane.io.sinks import Sink, WriteResult


def _resume(resume: object, caller: str) -> Resume | None:
    if resume not in (False, True, "restart"):
        raise ConfigurationError(
            f"{caller}(): resume must be True, False or 'restart', got {resume!r}"
        )
    return resume or None


class Writes(RelationBase):
    """write_parquet, write_csv, write_json and the table formats' writes."""

    __slots__ = ()

    def _write(  # noqa: PLR0917 - private; the write_* methods name every argument
        self,
        fmt: FileFormat,
        path: str,
        mode: WriteMode,
        partition_by: str | Sequence[str] | None,
        rows_per_file: int | None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        from vane.io.sinks import FileSink  # (with the first write, not with every relation)

        sink = FileSink(
            fmt,
            str(path),
            mode,
            _as_tuple(partition_by, "partition_by"),
            rows_per_file,
            _storage(path, storage_options, f"write_{fmt}"),
        )
        return self._run(sink, f"write_{fmt}", resume, errors_to, errors_key, retry_failed)

    def _run(  # noqa: PLR0917 - private; the write_* methods name every argument
        self,
        sink: Sink,
        caller: str,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Hand the write to the runner, with its resume and error-ledger options checked;
        ``retry_failed``: the rows of the ledger ``errors_to``, as ``retry_failed()`` gives."""
        plan = self._plan
        if retry_failed:
            if errors_to is None:
                raise ConfigurationError(
                    f"{caller}(retry_failed=True) runs again the rows of an error ledger: pass "
                    "errors_to= with the ledger an earlier write made"
                )
            if getattr(sink, "mode", "append") != "append":
                raise ConfigurationError(
                    f"{caller}(retry_failed=True) adds the retried rows to the output, which "
                    "holds the others already: pass mode='append'"
                )
            plan = self.retry_failed(errors_to)._plan
        ledger = None
        if errors_to is not None:
            from vane.io.ledger import check_path

            ledger = check_path(errors_to, sink.path, caller)
        elif errors_key is not None:
            raise ConfigurationError(
                f"{caller}(): errors_key names the key columns of the error ledger, and there is "
                "none: pass errors_to='errors.parquet' too"
            )
        key = None if errors_key is None else _as_tuple(errors_key, "errors_key")
        return current_runner().write(
            plan,
            sink,
            resume=_resume(resume, caller),
            errors_to=ledger,
            errors_key=key,
        )

    @checked
    def retry_failed(self, errors_path: str) -> Self:
        """This pipeline run again on only the rows its write left in the error ledger at
        ``errors_path`` (``write_*(..., errors_to=errors_path)``), each from the step that
        failed it. Write the result to the job's output with ``mode="append"`` and
        ``errors_to=errors_path``: the rows that succeed now join the output and the ledger is
        replaced, in the same commit, by the rows that failed again, so every row is in the
        output once however many times it is retried (docs/resume.md)::

            job.write_parquet("out/", errors_to="errors.parquet")
            job.retry_failed("errors.parquet").write_parquet(
                "out/", mode="append", errors_to="errors.parquet"
            )

        The ledger's rows are read now; the pipeline must be the one that wrote it (its steps,
        and their input columns), with steps that answer row by row after each failing one.
        Rows that ``on_error="null"`` kept in the output cannot be retried this way."""
        from vane.execution.ledger import retry_plan
        from vane.io import ledger
        from vane.plan.optimizer import optimize

        path = str(errors_path)
        table = ledger.read(path, "retry_failed")
        output = ledger.recorded_output(table)
        return self._derive(retry_plan(optimize(self._plan), table, path, output))

    @checked
    def write_lance(
        self,
        uri: str,
        *,
        mode: Literal["create", "append", "overwrite"] = "create",
        max_rows_per_file: int | None = None,
        data_storage_version: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        vector_index: Mapping[str, Any] | None = None,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Stream the rows into a Lance dataset, committed as one new version: on failure the
        dataset stays at its previous version.

        ``mode``: ``"create"`` (the default; an existing dataset is an error), ``"append"``
        (adds a version; creates the dataset if there is none) or ``"overwrite"`` (a version
        holding only these rows). ``vector_index={"column": "embedding", "metric": "cosine",
        ...}`` builds Lance's vector index on a fixed-size float column after the rows commit
        (``index_type`` defaults to ``"IVF_PQ"``; other keys such as ``num_partitions`` and
        ``num_sub_vectors`` go to ``LanceDataset.create_index``). ``resume``, ``errors_to``
        and ``errors_key`` as for ``write_parquet``.
        """
        from vane.io.tables.lance import LanceSink, VectorIndex

        sink = LanceSink(
            uri,
            mode,
            max_rows_per_file,
            data_storage_version,
            storage_options,
            VectorIndex.parse(vector_index),
        )
        return self._run(sink, "write_lance", resume, errors_to, errors_key, retry_failed)

    @checked
    def write_deltalake(
        self,
        table_uri: str,
        *,
        mode: Literal["error", "append", "overwrite"] = "error",
        partition_by: str | Sequence[str] | None = None,
        schema_mode: Literal["merge", "overwrite"] | None = None,
        target_file_size: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Stream the rows into a Delta Lake table (delta-rs), committed as one new version:
        on failure the table stays at its previous version.

        ``mode``: ``"error"`` (the default; an existing table is an error), ``"append"`` or
        ``"overwrite"``; ``schema_mode="merge"`` or ``"overwrite"`` lets the table's columns
        change; ``partition_by`` writes hive-style partitions. ``resume``, ``errors_to`` and
        ``errors_key`` as for ``write_parquet``.
        """
        from vane.io.tables.delta import DeltaSink

        sink = DeltaSink(
            table_uri,
            mode,
            _as_tuple(partition_by, "partition_by"),
            schema_mode,
            storage_options,
            target_file_size,
        )
        return self._run(sink, "write_deltalake", resume, errors_to, errors_key, retry_failed)

    @checked
    def write_iceberg(
        self,
        table: Any,
        *,
        mode: Literal["append", "overwrite"] = "append",
        catalog_kwargs: Mapping[str, Any] | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Stream the rows into an Iceberg table (pyiceberg), committed as one new snapshot:
        on failure the table stays at its previous snapshot.

        ``table``: a ``pyiceberg.table.Table``, or an identifier (``"namespace.table"``) in
        the catalog ``catalog_kwargs`` describe (as for ``vane.read_iceberg``); an identifier
        that names no table yet is created with the relation's columns. ``mode``: ``"append"``
        (the default) or ``"overwrite"``.
        """
        from vane.io.tables.iceberg import IcebergSink

        sink = IcebergSink(table, mode, catalog_kwargs, snapshot_properties, storage_options)
        return current_runner().write(self._plan, sink)

    @checked
    def write_parquet(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Stream the rows into Parquet files under ``path`` (or one file if ``path`` ends in
        ``.parquet``), committed atomically: on failure ``path`` is left as it was.

        ``mode``: ``"error"`` if ``path`` exists, ``"overwrite"`` replaces it on success,
        ``"append"`` adds files on success. ``partition_by`` writes hive-style ``key=value``
        directories; ``rows_per_file`` caps each file's rows.

        ``path`` may be a URL (``s3://bucket/out/``, ``gs://...``, any fsspec protocol), with
        ``storage_options`` for its credentials; an object store commits through a manifest
        written last (docs/io.md, "Where your data lives").

        ``resume=True`` keeps each UDF step's answers as they come (beside ``path``), so a rerun
        of the same pipeline after a crash, Ctrl-C or ``kill -9`` pays only for the batches no
        run had answered, and the output still holds every row once (docs/resume.md).
        ``resume="restart"`` drops work saved for another pipeline and starts over.

        ``errors_to="errors.parquet"`` keeps each row that a step with ``on_error="skip"`` (or
        ``"null"``) dropped (or nulled) in an error ledger, a Parquet file committed with the
        output (a failed write leaves neither): the row's key columns (``errors_key``; by
        default every input column of the step), the step's name, the error's type and message
        and the calls it was in. ``retry_failed(errors_to)`` runs only those rows again, and so
        does this write with ``retry_failed=True`` (and ``mode="append"``).
        """
        return self._write(
            "parquet",
            path,
            mode,
            partition_by,
            rows_per_file,
            storage_options,
            resume=resume,
            errors_to=errors_to,
            errors_key=errors_key,
            retry_failed=retry_failed,
        )

    @checked
    def write_csv(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Like ``write_parquet``, as CSV files with a header row."""
        return self._write(
            "csv",
            path,
            mode,
            partition_by,
            rows_per_file,
            storage_options,
            resume=resume,
            errors_to=errors_to,
            errors_key=errors_key,
            retry_failed=retry_failed,
        )

    @checked
    def write_json(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
        errors_to: str | None = None,
        errors_key: str | Sequence[str] | None = None,
        retry_failed: bool = False,
    ) -> WriteResult:
        """Like ``write_parquet``, as newline-delimited JSON files (one object per row)."""
        return self._write(
            "json",
            path,
            mode,
            partition_by,
            rows_per_file,
            storage_options,
            resume=resume,
            errors_to=errors_to,
            errors_key=errors_key,
            retry_failed=retry_failed,
        )


def _storage(
    path: object, options: Mapping[str, Any] | None, caller: str
) -> tuple[tuple[str, Any], ...] | None:
    """The store options of a remote destination (None for a local path, which takes none)."""
    from vane.io import storage

    if not isinstance(path, str) or not storage.is_remote(path):
        if options:
            raise ConfigurationError(
                f"{caller}(): storage_options apply to remote paths (s3://...), and "
                f"{path!r} is local"
            )
        return None
    return storage.locate(path, options, caller).store.options
