"""Constructors: every way to start a ``Relation``. All are lazy; files are found (and their
schema read from metadata) here, but no rows are read until an action runs."""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane._arguments import checked
from vane._arrow import exact_array
from vane.errors import ConfigurationError, PlanError, SchemaError, SourceError
from vane.io import readers
from vane.io.files import FileFormat, Paths, is_uri, resolve_files
from vane.io.readers import duckdb_options
from vane.io.tables.base import TableSource
from vane.ir.expr import Expr
from vane.plan import nodes
from vane.plan.sql_calls import sql_query
from vane.relation import Relation
from vane.types.storable import storable_reader, storable_table

if TYPE_CHECKING:
    import pandas as pd


# Times to list again when a write replaced the files between listing them and reading their
# schema (an overwrite committing at that instant).
_LISTING_ATTEMPTS = 3


def _read(
    fmt: FileFormat,
    path: Paths,
    caller: str,
    columns: Sequence[str] | str | None,
    options: dict[str, object],
) -> Relation:
    hive = options.pop("hive_partitioning", None)
    storage_options: Any = options.pop("storage_options", None)
    settings = duckdb_options(fmt, options, caller)
    keep = _keep(columns, caller)
    for attempt in builtins.range(_LISTING_ATTEMPTS):  # this module defines vane.range
        found = resolve_files(path, fmt, caller, storage_options)
        files = found.files
        # Always explicit: DuckDB's CSV and JSON readers would otherwise detect key=value
        # directories on their own, even when the user turned that off.
        settings["hive_partitioning"] = found.hive if hive is None else bool(hive)
        try:
            scan = nodes.FileScan(
                fmt,
                files,
                found.label,
                tuple(sorted(settings.items())),
                keep,
                # Remote: the listing's stamps, so that the plan lists its prefix once.
                stamps=found.stamps if found.stamps and len(found.stamps) == len(files) else None,
                storage=found.storage,
            )
            return Relation(scan)
        except SourceError:
            replaced = len(readers.stamps(files, found.storage)) < len(files)
            if not replaced or attempt == _LISTING_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _keep(columns: Sequence[str] | str | None, caller: str) -> tuple[str, ...] | None:
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    if not columns or not all(isinstance(c, str) for c in columns):
        raise ConfigurationError(f"{caller}(): columns= takes a list of column names")
    return tuple(columns)


@checked
def read_parquet(
    path: Paths,
    *,
    columns: Sequence[str] | None = None,
    union_by_name: bool | None = None,
    hive_partitioning: bool | None = None,
    filename: bool | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Relation:
    """Parquet files: a file, a directory (read recursively), a glob, or a list of them.

    ``columns`` keeps only those; files whose columns differ are combined by name (a column a
    file lacks is null there; types widen; types that cannot combine are an error naming the
    files). ``key=value`` directories become columns when found (``hive_partitioning=False``
    ignores them); ``filename=True`` (or a column name) adds each row's file.

    >>> import vane
    >>> rel = vane.read_parquet("data/", columns=["id", "text"])  # doctest: +SKIP
    """
    options.update(union_by_name=union_by_name, hive_partitioning=hive_partitioning)
    options.update(filename=filename, storage_options=storage_options)
    return _read("parquet", path, "read_parquet", columns, options)


@checked
def read_csv(
    path: Paths,
    *,
    columns: Sequence[str] | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    null_values: Sequence[str] | str | None = None,
    types: Mapping[str, Any] | None = None,
    date_format: str | None = None,
    timestamp_format: str | None = None,
    ignore_errors: bool | None = None,
    union_by_name: bool | None = None,
    hive_partitioning: bool | None = None,
    filename: bool | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Relation:
    """CSV files (local, or URLs as ``read_parquet`` takes them); the dialect and column types
    are detected unless given.

    ``null_values`` (such as ``["NA", ""]``) are read as nulls; ``types`` fixes some columns'
    types (``{"score": "DOUBLE"}``); ``date_format`` / ``timestamp_format`` use strftime codes;
    ``ignore_errors=True`` skips rows that do not parse. Also ``quote``, ``escape``,
    ``skip_rows``, ``null_padding`` (rows with fewer fields get nulls), ``sample_size``,
    ``all_varchar``, ``encoding``, ``compression``, and DuckDB's own names for these.
    """
    options.update(
        delimiter=delimiter,
        header=header,
        null_values=null_values,
        types=types,
        date_format=date_format,
        timestamp_format=timestamp_format,
        ignore_errors=ignore_errors,
        union_by_name=union_by_name,
        hive_partitioning=hive_partitioning,
        filename=filename,
        storage_options=storage_options,
    )
    return _read("csv", path, "read_csv", columns, options)


@checked
def read_json(
    path: Paths,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    union_by_name: bool | None = None,
    hive_partitioning: bool | None = None,
    filename: bool | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Relation:
    """JSON files (local, or URLs as ``read_parquet`` takes them):
    ``format="newline_delimited"`` (the default: one object per line), ``"array"`` (one
    array of objects) or ``"auto"``; types are detected. Also ``types``,
    ``date_format``, ``timestamp_format``, ``ignore_errors``, ``sample_size``."""
    options.update(
        format=format,
        union_by_name=union_by_name,
        hive_partitioning=hive_partitioning,
        filename=filename,
        storage_options=storage_options,
    )
    return _read("json", path, "read_json", columns, options)


@checked
def from_arrow(data: Any) -> Relation:
    """A ``pa.Table``, ``pa.RecordBatch``, ``pa.RecordBatchReader`` (streamed, readable once),
    or any object with an Arrow C stream (``__arrow_c_stream__``)."""
    if isinstance(data, pa.RecordBatchReader):
        return Relation(nodes.ArrowStreamScan(storable_reader(data)))
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif not isinstance(data, pa.Table):
        if not hasattr(data, "__arrow_c_stream__"):
            raise ConfigurationError(
                "from_arrow() takes a pyarrow Table, RecordBatch or RecordBatchReader, or an "
                f"object that exports an Arrow stream; got {type(data).__name__}"
            )
        data = pa.table(data)
    return Relation(nodes.ArrowScan(storable_table(data)))


def _column(name: str, values: Any) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise SchemaError(
            f"column {name!r} cannot be converted to Arrow: {exc}. Give every value of a "
            "column the same type (numbers, strings, bytes, lists or dicts of those)"
        ) from exc


@checked
def from_pydict(data: Mapping[str, Any]) -> Relation:
    """Columns given as ``{name: list or array}``.

    >>> import vane
    >>> vane.from_pydict({"id": [1, 2], "text": ["a", "b"]}).count()
    2
    """
    if not isinstance(data, Mapping) or not data:
        raise ConfigurationError("from_pydict() takes a non-empty dict of {column: values}")
    columns = {str(name): _column(str(name), values) for name, values in data.items()}
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        raise SchemaError(
            f"from_pydict(): columns have different lengths: {lengths}; every column needs one "
            "value per row"
        )
    return Relation(nodes.ArrowScan(storable_table(pa.table(columns))))


@checked
def from_pylist(rows: Iterable[Mapping[str, Any]]) -> Relation:
    """Rows given as dicts; a key missing from a row is null there. Columns appear in the order
    their keys are first seen."""
    rows = list(rows)
    if not rows or not all(isinstance(r, Mapping) for r in rows):
        raise ConfigurationError("from_pylist() takes a non-empty list of dicts, one per row")
    names = list(dict.fromkeys(key for row in rows for key in row))
    return from_pydict({name: [row.get(name) for row in rows] for name in names})


@checked
def from_pandas(df: pd.DataFrame) -> Relation:
    """A pandas DataFrame (its index is not kept; ``reset_index()`` first to keep it)."""
    from vane._deps import require

    pd = require("pandas", extra="pandas")
    if not isinstance(df, pd.DataFrame):
        raise ConfigurationError(f"from_pandas() takes a pandas DataFrame, got {type(df).__name__}")
    names = [str(name) for name in df.columns]
    if len(set(names)) != len(names):
        raise SchemaError(f"from_pandas(): the DataFrame has duplicate column names: {names}")
    columns = {}
    for name, label in zip(names, df.columns, strict=True):
        try:
            columns[name] = exact_array(df[label])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise SchemaError(
                f"from_pandas(): column {name!r} cannot be converted to Arrow: {exc}"
            ) from exc
    return Relation(nodes.ArrowScan(storable_table(pa.table(columns))))


def sql(query: str, **relations: Relation) -> Relation:
    """DuckDB SQL; relations passed by keyword are tables of that name in the query.

    >>> import vane
    >>> a = vane.from_pydict({"id": [1, 2]})
    >>> vane.sql("SELECT count(*) AS n FROM a", a=a).to_pylist()
    [{'n': 2}]
    """
    for name, rel in relations.items():
        if not isinstance(rel, Relation):
            raise PlanError(f"sql(): {name}= must be a vane Relation, got {type(rel).__name__}")
    from vane.udf.attached import attached  # (the UDFs' modules load with the first UDF)

    inputs = tuple((n, r.plan) for n, r in relations.items())
    return Relation(sql_query(query, inputs, attached()))


@checked
def range(n: int) -> Relation:
    """``n`` rows with one ``BIGINT`` column ``id`` = 0 .. n-1."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigurationError(f"range() takes an integer n >= 0, got {n!r}")
    return Relation(nodes.RangeScan(n))


def _file_listing(files: Sequence[str], storage: Any) -> pa.Table:
    """One row per file: its path, size and modification time (UTC), read from the file
    system now, as ``read_parquet`` reads its files' metadata when the plan is built."""
    import datetime as dt

    from vane.io.storage import locate_with
    from vane.io.storage_errors import storage_errors

    sizes: list[int] = []
    times: list[dt.datetime] = []
    for path in files:
        try:
            if is_uri(path):  # an object store's listing: through its store
                where = locate_with(path, storage or ())
                with storage_errors(path, "from_glob_path(): cannot read", where.store):
                    found = where.store.filesystem().get_file_info(where.path)
                sizes.append(int(found.size or 0))
                mtime = found.mtime or dt.datetime.fromtimestamp(0, dt.timezone.utc)
                times.append(mtime if mtime.tzinfo else mtime.replace(tzinfo=dt.timezone.utc))
                continue
            info = os.stat(path)
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"cannot read the file {path!r}: {exc}") from exc
        sizes.append(info.st_size)
        times.append(dt.datetime.fromtimestamp(info.st_mtime, dt.timezone.utc))
    return pa.table(
        {
            "path": pa.array(list(files), pa.string()),
            "size": pa.array(sizes, pa.int64()),
            "modification_time": pa.array(times, pa.timestamp("us", tz="UTC")),
        }
    )


def _remembered(resolved: Any) -> None:
    """Files listed in an object store are opened, wherever a UDF opens them, with the options
    their listing had (io/file_stores.py)."""
    if resolved.storage is not None:
        from vane.io import file_stores

        file_stores.remember(resolved.files, resolved.storage)


@checked
def from_glob_path(path: Paths, *, storage_options: Mapping[str, Any] | None = None) -> Relation:
    """One row per file that ``path`` (a glob such as ``"audio/**/*.mp3"``, a directory read
    recursively, a file, or a list of them) matches: ``path``, ``size`` in bytes and
    ``modification_time``, as Daft's ``from_glob_path``. Nothing is read from the files; hand
    ``path`` to ``vane.functions.file`` (a ``vane.File`` for a UDF), ``read_bytes`` or the image
    functions, which read in the workers.

    In an object store, ``storage_options`` (as ``read_parquet`` takes them) list the files,
    and stay with their bucket: a ``vane.File`` from it opens with them in any worker.

    >>> import vane
    >>> vane.from_glob_path("audio/*.mp3").columns  # doctest: +SKIP
    ['path', 'size', 'modification_time']
    """
    found = resolve_files(path, "file", "from_glob_path", storage_options)
    _remembered(found)
    return Relation(nodes.ArrowScan(storable_table(_file_listing(found.files, found.storage))))


@checked
def read_images(
    path: Paths,
    *,
    size: tuple[int, int] | None = None,
    mode: str | None = "RGB",
    include_paths: bool = True,
    on_error: str = "raise",
    storage_options: Mapping[str, Any] | None = None,
) -> Relation:
    """Images in a folder, a glob, or a list of them (``.jpg``, ``.png``, ``.gif``, ``.bmp``,
    ``.tiff``, ``.webp``), as Ray Data's ``read_images``: a column ``image`` of decoded pixels,
    and ``path`` unless ``include_paths=False``. With ``size=(height, width)`` every image is
    resized to it (a ``UTINYINT[c][w][h]`` column: ``(n, h, w, c)`` numpy batches); without, they
    keep their own sizes. ``mode`` is ``"RGB"``, ``"RGBA"``, ``"L"`` (or None: the file's own).
    Decoding runs in the workers, in batches; a corrupt file fails the run naming its row, or
    gives a null image with ``on_error="null"``. ``storage_options`` are for an object store,
    as ``from_glob_path`` takes them.

    >>> import vane
    >>> rel = vane.read_images("photos/", size=(224, 224))  # doctest: +SKIP
    """
    found = resolve_files(path, "image", "read_images", storage_options)
    _remembered(found)
    files = found.files
    from vane import functions  # (the image functions: not every job's import)

    if size is not None:
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
        ):
            raise ConfigurationError(
                f"read_images(): size is (height, width) in pixels, got {size!r}"
            )
        if mode is None:
            raise ConfigurationError(
                "read_images(): images resized to one size need one mode: pass mode='RGB', "
                "'RGBA' or 'L' with size="
            )
        height, width = size
        image = functions.resize_image("path", width, height, mode=mode, on_error=on_error)
    else:
        image = functions.decode_image("path", mode=mode, on_error=on_error)
    rel = Relation(nodes.ArrowScan(storable_table(pa.table({"path": pa.array(files)}))))
    return rel.select(image.alias("image"), *(["path"] if include_paths else []))


# ---- table formats (vane.io.tables) --------------------------------------------------------


def _table(source: TableSource, columns: Sequence[str] | str | None, caller: str) -> Relation:
    """A table format's source as a relation: ``columns`` kept by a projection that DuckDB
    pushes into the format's scanner."""
    rel = Relation(nodes.TableScan(source))
    keep = _keep(columns, caller)
    if keep is None:
        return rel
    missing = [c for c in keep if c not in rel.columns]
    if missing:
        raise ConfigurationError(
            f"{caller}(): `{source.describe()}` has no column {', '.join(map(repr, missing))}; "
            f"its columns are {', '.join(rel.columns)}"
        )
    return rel.select(*keep)


@checked
def read_lance(
    uri: str,
    *,
    version: int | str | None = None,
    columns: Sequence[str] | None = None,
    filter: str | Expr | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Relation:
    """A Lance dataset (a directory such as ``"embeddings.lance"``, or an object-store URI), at
    its latest version when this is called (every action reads that version) or ``version``.

    ``columns`` and ``filter`` (a predicate in vane's SQL, like ``"label = 2 AND text IS NOT
    NULL"``, or an expression) are pushed into Lance's scanner, as are the projections and
    filters of later steps: DuckDB hands Lance the parts it can evaluate (comparisons, ``IN``,
    ``IS NULL``, ``AND``/``OR`` of them) and applies the rest itself.

    >>> import vane
    >>> vane.read_lance("embeddings.lance", filter="id < 10")  # doctest: +SKIP
    """
    from vane.io.tables.lance import LanceSource

    rel = _table(LanceSource.at(uri, version, storage_options), columns, "read_lance")
    return rel if filter is None else rel.filter(filter)


@checked
def read_deltalake(
    table_uri: str,
    *,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    filter: str | Expr | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Relation:
    """A Delta Lake table (the directory holding ``_delta_log/``, or an object-store URI), at
    its latest version when this is called (every action reads that version) or ``version``.

    ``columns`` and ``filter`` (a SQL predicate) are pushed into the table's Parquet scan,
    which skips files and row groups by their statistics, as are later steps' projections and
    filters.
    """
    from vane.io.tables.delta import DeltaSource

    rel = _table(DeltaSource.at(table_uri, version, storage_options), columns, "read_deltalake")
    return rel if filter is None else rel.filter(filter)


@checked
def read_iceberg(
    table: Any,
    *,
    columns: Sequence[str] | None = None,
    row_filter: Any = None,
    snapshot_id: int | None = None,
    catalog_kwargs: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Relation:
    """An Iceberg table: an identifier (``"namespace.table"``) in the catalog that
    ``catalog_kwargs`` describe (as ``pyiceberg.catalog.load_catalog`` takes them:
    ``{"name": "default", "type": "sql", "uri": "sqlite:///catalog.db", "warehouse": ...}``),
    or a ``pyiceberg.table.Table``; at its current snapshot when this is called, or
    ``snapshot_id``.

    ``columns`` and ``row_filter`` (pyiceberg's filter: a string such as ``"id > 5 AND kind =
    'a'"`` or an expression) go to pyiceberg's scan, which reads only those columns and skips
    files and row groups the filter rules out.
    """
    from vane.io.tables.iceberg import IcebergSource

    source = IcebergSource.at(
        table,
        catalog_kwargs=catalog_kwargs,
        storage_options=storage_options,
        snapshot_id=snapshot_id,
        columns=_keep(columns, "read_iceberg"),
        row_filter=row_filter,
    )
    return Relation(nodes.TableScan(source))
