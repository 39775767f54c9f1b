"""Reading files with DuckDB: the options users pass, their DuckDB names, and the checks that
keep a folder of files from silently losing columns or changing values.

Files are handed to DuckDB's ``read_parquet`` / ``read_csv`` / ``read_json`` table functions
through SQL with named parameters (DuckDB's documented names), and every path is escaped so
DuckDB reads exactly the file vane listed: DuckDB expands ``*``, ``?`` and ``[...]`` in paths,
and ``x[1].parquet`` would otherwise read ``x1.parquet``.

Files of one source are combined **by column name**: a column some files lack is null in their
rows, and types widen only where every value stays as it is (``combine``). Each file's identity
(device, inode, size, modification time) is noted when it is listed, so that a read can tell
that a file was replaced since.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane._sql import quote_ident, quote_literal, sql_list
from vane.errors import (
    ConfigurationError,
    SchemaError,
    SourceError,
    StorageError,
    StorageNotFoundError,
)

if TYPE_CHECKING:
    import duckdb

# What identifies a file's content without reading it: replaced or rewritten, it differs.
Stamp = tuple[int, int, int, int]

# vane's option -> DuckDB's parameter; DuckDB's own names are accepted too (its error messages
# recommend them), and so are the pandas-style names users bring.
_COMMON = {
    "union_by_name": "union_by_name",
    "hive_partitioning": "hive_partitioning",
    "filename": "filename",
}
OPTIONS: dict[str, dict[str, str]] = {
    "parquet": {**_COMMON, "binary_as_string": "binary_as_string"},
    "csv": {
        **_COMMON,
        "delimiter": "delim",
        "delim": "delim",
        "sep": "delim",
        "header": "header",
        "null_values": "nullstr",
        "nullstr": "nullstr",
        "na_values": "nullstr",
        "types": "types",
        "dtypes": "types",
        "date_format": "dateformat",
        "dateformat": "dateformat",
        "timestamp_format": "timestampformat",
        "timestampformat": "timestampformat",
        "ignore_errors": "ignore_errors",
        "quote": "quote",
        "escape": "escape",
        "skip_rows": "skip",
        "skip": "skip",
        "null_padding": "null_padding",
        "sample_size": "sample_size",
        "all_varchar": "all_varchar",
        "strict_mode": "strict_mode",
        "encoding": "encoding",
        "compression": "compression",
    },
    "json": {
        **_COMMON,
        "format": "format",
        "types": "columns",
        "date_format": "dateformat",
        "dateformat": "dateformat",
        "timestamp_format": "timestampformat",
        "timestampformat": "timestampformat",
        "ignore_errors": "ignore_errors",
        "sample_size": "sample_size",
        "maximum_object_size": "maximum_object_size",
        "compression": "compression",
    },
}
_JSON_FORMATS = {"newline_delimited": "newline_delimited", "array": "array", "auto": "auto"}


def duckdb_path(path: str) -> str:
    """``path`` as a DuckDB glob that matches only itself: each glob character in a class of
    its own (``[*]`` is a literal ``*``)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def duckdb_options(fmt: str, options: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """The user's reader options under DuckDB's names, or a ``ConfigurationError`` listing the
    valid ones."""
    known = OPTIONS[fmt]
    unknown = sorted(set(options) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigurationError(
            f"{caller}(): unknown option(s) {unknown}{guess}; the options are "
            f"{', '.join(sorted(known))}"
        )
    converted: dict[str, Any] = {}
    for name, given in options.items():
        if given is not None:
            converted[known[name]] = _option(name, given, caller)
    if fmt == "csv":
        # write_csv quotes an empty string ("") and leaves a null unquoted (nothing between
        # the commas): read them back as they were written
        converted.setdefault("allow_quoted_nulls", False)
    return converted


def _option(name: str, value: Any, caller: str) -> Any:
    if name == "format" and value not in _JSON_FORMATS:
        raise ConfigurationError(
            f"{caller}(): format={value!r} is not one of {', '.join(_JSON_FORMATS)}"
        )
    if name in ("null_values", "nullstr", "na_values") and isinstance(value, str):
        return [value]
    if name in ("types", "dtypes"):
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{caller}(): types= takes a dict of {{column: DuckDB type}}, got {value!r}"
            )
        from vane.types import arrow_to_duckdb, to_arrow_type

        return {str(k): arrow_to_duckdb(to_arrow_type(v)) for k, v in value.items()}
    return value


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return quote_literal(value)
    if isinstance(value, Mapping):
        return (
            "{"
            + sql_list(f"{quote_literal(str(k))}: {_literal(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + sql_list(_literal(v) for v in value) + "]"
    raise ConfigurationError(f"a reader option cannot be {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class JsonLines:
    """What each line of a JSON source holds, as DuckDB detected it: ``columns`` (name ->
    DuckDB type), each line an object with those keys; or, if ``whole``, one column ``json``
    that is the line's whole value (lines that are not objects, or all ``{}``)."""

    columns: dict[str, str]
    whole: bool = False


def scan_sql(
    fmt: str,
    files: Sequence[str],
    options: Mapping[str, Any],
    records: JsonLines | None = None,
) -> str:
    """``FROM read_<fmt>([...files...], option = value, ...)`` with every path literal.

    ``records`` (JSON with ``ignore_errors``): what the lines hold. DuckDB's
    ``read_json`` turns a line that does not parse into a row of nulls, indistinguishable from
    ``{}``; such lines are skipped instead, as ``read_csv`` skips rows that do not parse: each
    line is read as a JSON value (``read_json_objects``, NULL where it does not parse), and the
    ones that parse become rows of those columns (``json_transform``, which, as ``read_json``
    does with ``ignore_errors``, makes a field null where its value does not fit its type)."""
    paths = "[" + sql_list(quote_literal(duckdb_path(f)) for f in files) + "]"
    if fmt == "json":
        options = {"format": "newline_delimited", **options}
    if fmt == "json" and records is not None:
        return _json_records_sql(paths, options, records)
    settings = [f"{name} = {_literal(value)}" for name, value in sorted(options.items())]
    return f"FROM read_{fmt}({sql_list([paths, *settings])})"


_OBJECT_OPTIONS = (
    "compression",
    "filename",
    "format",
    "hive_partitioning",
    "ignore_errors",
    "maximum_object_size",
    "union_by_name",
)
_RECORD = "__vane_record"


def _json_records_sql(paths: str, options: Mapping[str, Any], records: JsonLines) -> str:
    # json_transform parses dates and timestamps in ISO form only: where the user gave a
    # format, the field is taken as text and parsed with it, as read_json would.
    formats = {"DATE": options.get("dateformat"), "TIMESTAMP": options.get("timestampformat")}
    structure: dict[str, str] = {}
    items: list[str] = []
    for name, kind in records.columns.items():
        value = quote_ident(_RECORD)
        if not records.whole:
            value = f"struct_extract({value}, {quote_literal(name)})"
        layout = next((f for k, f in formats.items() if f and kind.startswith(k)), None)
        if layout is not None:
            structure[name] = "VARCHAR"
            value = f"try_strptime({value}, {quote_literal(str(layout))})::{kind}"
        else:
            structure[name] = kind
        items.append(f"{value} AS {quote_ident(name)}")
    settings = [
        f"{name} = {_literal(value)}"
        for name, value in sorted(options.items())
        if name in _OBJECT_OPTIONS
    ]
    objects = f"read_json_objects({sql_list([paths, *settings])})"
    shape = structure["json"] if records.whole else structure
    transform = f"json_transform(json, {quote_literal(json.dumps(shape))})"
    return (
        f"SELECT {sql_list([*items, f'* EXCLUDE ({quote_ident(_RECORD)})'])} FROM "
        f"(SELECT {transform} AS {quote_ident(_RECORD)}, * EXCLUDE (json) FROM {objects} "
        "WHERE json IS NOT NULL)"
    )


def own_columns(fmt: str, options: Mapping[str, Any], *, alone: bool = False) -> dict[str, Any]:
    """The options to read a source's files for their own columns only: no hive columns, no
    filename, and for JSON the types DuckDB detects rather than any given; ``alone``: for
    reading one file by itself."""
    dropped = {"filename"} | ({"columns"} if fmt == "json" else set())
    if alone:
        dropped.add("union_by_name")
    return {k: v for k, v in options.items() if k not in dropped} | {"hive_partitioning": False}


def typed_columns(fmt: str, options: Mapping[str, Any]) -> set[str]:
    """The columns whose type the user gave (``types=``): DuckDB reads them as that type."""
    given = options.get("columns" if fmt == "json" else "types")
    return {str(k) for k in given} if isinstance(given, Mapping) else set()


def complete_json_options(
    cursor: duckdb.DuckDBPyConnection,
    files: Sequence[str],
    options: Mapping[str, Any],
    sizes: Sequence[int] | None = None,
) -> tuple[dict[str, Any], JsonLines | None]:
    """JSON options made whole, and the file columns' types for ``scan_sql``'s ``records``
    if lines that do not parse are to be skipped.

    DuckDB's ``columns`` is every column, so ``types=`` naming some would drop the rest: it gets
    the detected types of all, the given ones in their place."""
    completed = dict(options)
    if all(size == 0 for size in (sizes or [os.path.getsize(f) for f in files])):
        # DuckDB reads an empty file as one column `json`; write_json of no rows writes one
        if "columns" not in completed:
            raise SourceError(
                "read_json(): the files hold no lines, so their columns cannot be known from "
                "them; pass types={'column': 'TYPE', ...} to read them as an empty relation"
            )
    elif "columns" in completed:
        full = _types(cursor.sql(scan_sql("json", files, own_columns("json", completed))))
        full.update(completed["columns"])
        completed["columns"] = full
    if not completed.get("ignore_errors"):
        return completed, None
    own = own_columns("json", completed)
    if "columns" in completed:
        own["columns"] = completed["columns"]
    found = _types(cursor.sql(scan_sql("json", files, own)))
    whole = False
    if list(found) == ["json"] and "columns" not in completed:
        # One column `json`: an object's key, or each line's whole value (DuckDB reads lines
        # that are not objects so). Reading every line as a whole value tells which.
        whole = _types(cursor.sql(scan_sql("json", files, {**own, "records": False}))) == found
    nested = [n for n, t in found.items() if _nested_dates(t)]
    if nested and (completed.get("dateformat") or completed.get("timestampformat")):
        raise ConfigurationError(
            "read_json(): ignore_errors=True with date_format or timestamp_format cannot "
            f"parse dates inside nested columns ({', '.join(nested)}). Read them as text with "
            f"types={{{nested[0]!r}: 'VARCHAR'}} and parse them after"
        )
    return completed, JsonLines(found, whole)


def _types(relation: duckdb.DuckDBPyRelation) -> dict[str, str]:
    return {n: str(t) for n, t in zip(relation.columns, relation.types, strict=True)}


def _nested_dates(kind: str) -> bool:
    """A nested DuckDB type with dates or timestamps inside."""
    nested = kind.startswith(("STRUCT", "MAP", "UNION")) or kind.endswith("]")
    return nested and any(word in kind for word in ("DATE", "TIMESTAMP"))


Storage = tuple[tuple[str, Any], ...] | None  # a remote source's store options (io/storage.py)


def stamps(files: Sequence[str], storage: Storage = None) -> dict[str, Stamp]:
    """Each file's identity now (files that are gone are left out). An object's is its size
    and modification time (one listing request for many)."""
    found: dict[str, Stamp] = {}
    if storage is not None and files:
        return _object_stamps(files, storage)
    for path in files:
        try:
            found[path] = stamp(os.stat(path))
        except OSError:
            continue
    return found


# From this many objects on, their stamps come from one listing of the prefix they share
# rather than a request each (16 files: 1 request instead of 16). S3 lists only the keys
# between the first object and the last, in one request however few they are.
_LIST_FROM = 4


def _object_stamps(urls: Sequence[str], storage: tuple[tuple[str, Any], ...]) -> dict[str, Stamp]:
    import posixpath

    from pyarrow.fs import FileSelector, FileType

    from vane.io import s3_objects
    from vane.io.storage import HTTP, http_info, locate_with, object_stamp, seen
    from vane.io.storage_errors import storage_errors

    places = [locate_with(url, storage) for url in urls]
    store = places[0].store
    fs = store.filesystem()
    paths = [p.path for p in places]
    found: dict[str, Any] = {}
    etags: dict[str, str] = {}
    s3 = store.protocol == "s3"  # through botocore: S3's listing says each object's ETag
    with storage_errors(urls[0], "cannot look at", store):
        shared = posixpath.commonpath([posixpath.dirname(p) for p in paths])
        buckets = {p.partition("/")[0] for p in paths}
        if s3 and len(buckets) == 1 and all("/" in p for p in paths):
            # The keys from the first object to the last, in one listing request per thousand
            # (S3 lists keys in order): an object not among them is gone.
            between = (min(paths), max(paths))
            listed, etags = s3_objects.list_objects(
                store, shared or buckets.pop(), between, len(paths)
            )
            wanted = set(paths)
            found = {i.path: i for i in listed if i.path in wanted}
        else:
            if len(paths) >= _LIST_FROM and shared.strip("/"):
                wanted = set(paths)
                selector = FileSelector(shared, recursive=True, allow_not_found=True)
                found = {i.path: i for i in fs.get_file_info(selector) if i.path in wanted}
            rest = [p for p in paths if p not in found]
            if rest and s3:
                heads, tags = s3_objects.head_objects(store, rest)
                found.update((i.path, i) for i in heads)
                etags.update(tags)
            elif rest and store.protocol in HTTP:  # as the relation's listing asked them
                for path in rest:
                    info, etag = http_info(store, path)
                    found[path] = info
                    if etag:
                        etags[path] = etag
            elif rest:
                found.update(zip(rest, fs.get_file_info(rest), strict=True))
    files = [info for info in found.values() if info.type == FileType.File]
    seen(store, files, etags)  # what DuckDB asks of them next, it is told without a request
    return {
        url: object_stamp(store, info, etags.get(place.path))
        for url, place in zip(urls, places, strict=True)
        if (info := found.get(place.path)) is not None and info.type == FileType.File
    }


def duckdb_files(files: Sequence[str], storage: Storage) -> list[str]:
    """``files`` as DuckDB opens them: local paths as they are, URLs through their store,
    registered with this process's DuckDB (``storage.Store.duckdb_url``)."""
    if storage is None:
        return list(files)
    from vane import _engine
    from vane.io.storage import locate_with

    cursor = _engine.cursor()
    try:
        return [
            place.store.duckdb_url(place.path, cursor)
            for place in (locate_with(f, storage) for f in files)
        ]
    finally:
        cursor.close()


def stamp(status: os.stat_result) -> Stamp:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


# ---- Parquet files whose schemas differ ----------------------------------------------------


@dataclass(frozen=True)
class ParquetFooter:
    """What a Parquet file's footer says without reading its data."""

    schema: pa.Schema  # the stored Arrow schema
    rows: int


def parquet_footers(
    files: Sequence[str], storage: Storage = None, sizes: Sequence[int | None] | None = None
) -> list[ParquetFooter] | None:
    """Every file's footer (measured: one by one beats a thread pool on a small machine,
    150 us a footer; an object's footer is a ranged read or two, ``sizes``: the objects' sizes
    as their listing gave them, so that nothing asks for them again); None if pyarrow cannot
    read one (DuckDB then reports the problem when it reads the file)."""
    import pyarrow.parquet as pq

    try:
        footers = []
        for i, path in enumerate(files):
            source: Any = path
            if storage is not None:
                from pyarrow.fs import FileInfo, FileType

                from vane.io.storage import locate_with, open_object, recall

                place = locate_with(path, storage)
                recalled = recall(place.store, place.path)  # as its listing gave it
                info, etag = recalled if recalled is not None else (None, None)
                if info is None or (sizes is not None and info.size != sizes[i]):
                    size = sizes[i] if sizes is not None else None
                    info, etag = FileInfo(place.path, FileType.File, size=size), None
                source = open_object(place.store, info, etag)
            with pq.ParquetFile(source) as file:
                footers.append(ParquetFooter(file.schema_arrow, file.metadata.num_rows))
        return footers
    except StorageNotFoundError:
        return None  # gone since it was listed: the relation lists again
    except StorageError:
        raise  # the store, given up on after its retries: DuckDB's read would only wait again
    except (OSError, pa.ArrowException):
        return None


def check_names(files: Sequence[str], schemas: Sequence[pa.Schema]) -> None:
    """A ``SchemaError`` for a column with an empty name: DuckDB cannot hold one, and would
    read it under a name of its own (``C0``)."""
    for path, schema in zip(files, schemas, strict=True):
        if "" in schema.names:
            raise SchemaError(
                f"column {schema.names.index('')} of {path!r} has an empty name, which DuckDB "
                "cannot hold (it would be read as another name). Give the column a name, for "
                "example: pq.write_table(table.rename_columns(['id', ...]), path)"
            )


def fixed_size_columns(schemas: Sequence[pa.Schema]) -> dict[str, pa.DataType]:
    """Columns stored as lists whose Arrow schema says fixed-size (``FLOAT[384]``): Parquet has
    no fixed-size list, so reading casts them back, where every file agrees on the size."""
    found: dict[str, pa.DataType] = {}
    conflicting: set[str] = set()
    for schema in schemas:
        for f in schema:
            if pa.types.is_fixed_size_list(f.type):
                if f.name in found and not found[f.name].equals(f.type):
                    conflicting.add(f.name)
                found.setdefault(f.name, f.type)
            elif pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
                conflicting.add(f.name)
    return {name: t for name, t in found.items() if name not in conflicting}


def projection(columns: Sequence[str], names: Sequence[str], label: str) -> str:
    """The select list keeping ``columns`` of a scan whose columns are ``names``."""
    missing = [c for c in columns if c not in names]
    if missing:
        raise ConfigurationError(
            f"columns=: {label!r} has no column {', '.join(map(repr, missing))}; its columns "
            f"are {', '.join(names)}"
        )
    return sql_list(quote_ident(c) for c in columns)
