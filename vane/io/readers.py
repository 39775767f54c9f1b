"""Reading files with DuckDB: the options users pass, their DuckDB names, and the checks that
keep a folder of files from silently losing columns or changing values.

Files are handed to DuckDB's ``read_parquet`` / ``read_csv`` / ``read_json`` table functions
through SQL with named parameters (DuckDB's documented names), and every path is escaped so
DuckDB reads exactly the file vane listed: DuckDB expands ``*``, ``?`` and ``[...]`` in paths,
and ``x[1].parquet`` would otherwise read ``x1.parquet``.

Files of one source are combined **by column name**: a column some files lack is null in their
rows, and types widen (INTEGER and BIGINT give BIGINT). For Parquet, whose files carry types,
columns whose types cannot combine without changing values (numbers in one file, text in
another) are a ``SchemaError`` when the relation is built, naming the files. CSV and JSON are
typed by DuckDB's sniffer per file; where files disagree the column becomes VARCHAR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from vane._sql import quote_ident, quote_literal, sql_list
from vane.errors import ConfigurationError, SchemaError

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
        raise ConfigurationError(
            f"{caller}(): unknown option(s) {unknown}; the options are {', '.join(sorted(known))}"
        )
    converted: dict[str, Any] = {}
    for name, given in options.items():
        if given is not None:
            converted[known[name]] = _option(name, given, caller)
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


def scan_sql(fmt: str, files: Sequence[str], options: Mapping[str, Any]) -> str:
    """``FROM read_<fmt>([...files...], option = value, ...)`` with every path literal."""
    paths = "[" + sql_list(quote_literal(duckdb_path(f)) for f in files) + "]"
    if fmt == "json":
        options = {"format": "newline_delimited", **options}
    settings = [f"{name} = {_literal(value)}" for name, value in sorted(options.items())]
    return f"FROM read_{fmt}({sql_list([paths, *settings])})"


# ---- Parquet files whose schemas differ ----------------------------------------------------


def parquet_schemas(files: Sequence[str]) -> list[pa.Schema] | None:
    """Every file's stored Arrow schema (measured: one by one beats a thread pool on a small
    machine, 150 us a footer); None if pyarrow cannot read one (DuckDB then reports the
    problem when it reads the file)."""
    import pyarrow.parquet as pq

    try:
        return [pq.read_schema(f) for f in files]
    except (OSError, pa.ArrowException):
        return None


def check_combinable(files: Sequence[str], schemas: Sequence[pa.Schema], label: str) -> bool:
    """True if the files' schemas differ (they are combined by name), False if all are the
    same; a ``SchemaError`` naming the files if some column's types cannot combine."""
    from vane.types.cast import castable

    first = schemas[0]
    if all(s.equals(first, check_metadata=False) for s in schemas[1:]):
        return False
    seen: dict[str, dict[pa.DataType, str]] = {}
    for path, schema in zip(files, schemas, strict=True):
        for f in schema:
            seen.setdefault(f.name, {}).setdefault(f.type, path)
    for name, types in seen.items():
        kinds = list(types)
        if all(castable(a, b) or castable(b, a) for a in kinds for b in kinds):
            continue
        shown = "; ".join(f"{t} in {p!r}" for t, p in list(types.items())[:3])
        raise SchemaError(
            f"the files of {label!r} disagree about column {name!r}: {shown}. vane combines "
            "files by column name and widens types, but these cannot combine without changing "
            "values. Read the files separately and cast the column (or select it out), or "
            "rewrite them with one type"
        )
    return True


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
