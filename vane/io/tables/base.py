"""What the table formats share: the source and sink shapes the plan and the runners see, the
check that refuses a column a format cannot hold, and the parts a write reports."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from vane.errors import ConfigurationError, SinkError

if TYPE_CHECKING:
    import pyarrow.dataset

    from vane.io.sinks import Committed


class TableSource(Protocol):
    """One version of a table, as a plan's source holds it: picklable, and opened anew by each
    action that reads it."""

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of what ``open`` gives (after the columns asked for)."""
        ...

    def open(self) -> pyarrow.dataset.Dataset | pa.RecordBatchReader:
        """The rows: a dataset DuckDB scans with its own projection and filter pushdown, or a
        stream the format's scanner already narrowed."""
        ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class TablePart:
    """What one writer wrote: rows, data files and their bytes, the rows' schema, and what the
    format's commit needs to reference them (``payload``: Lance fragments; nothing for the
    others). A writer given no rows still reports one part, of no files, for the schema."""

    rows: int
    files: int
    bytes: int
    schema: pa.Schema
    payload: Any = None


class TableWrite(Protocol):
    """One write in progress, held by the driver (as ``vane.io.sinks.FileWrite``)."""

    @property
    def writer(self) -> Any: ...

    def commit(self, parts: list[TablePart]) -> Committed: ...

    def abort(self) -> None: ...


def check_mode(caller: str, mode: object, modes: tuple[str, ...]) -> None:
    if mode not in modes:
        raise ConfigurationError(
            f"{caller}(): mode={mode!r} is not one of {', '.join(repr(m) for m in modes)}"
        )


def check_storage_options(caller: str, options: object) -> dict[str, str] | None:
    """``storage_options`` as the format libraries take them: a dict of strings."""
    if options is None:
        return None
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigurationError(
            f"{caller}(): storage_options= takes a dict of option names to values, such as "
            "{'endpoint_url': 'http://127.0.0.1:9000'}"
        )
    return {k: str(v) for k, v in options.items()}


# Why a format cannot hold a type (None: it can), given the type.
Refusal = Callable[[pa.DataType], str | None]


def check_types(caller: str, schema: pa.Schema, refuse: Refusal, fix: Callable[[str], str]) -> None:
    """A ``SinkError`` naming the first column (a nested field as ``col.field``, a list's
    items as ``col[]``) whose type the format cannot hold, before anything is written: a
    format library would otherwise store another type in its place or fail halfway."""
    for f in schema:
        for where, kind in _walk(f.name, f.type):
            why = refuse(kind)
            if why is not None:
                raise SinkError(
                    f"{caller}(): column {where!r} is {kind}, which {why}. {fix(f.name)}; "
                    "nothing was written"
                )


def _walk(name: str, kind: pa.DataType) -> Iterable[tuple[str, pa.DataType]]:
    yield name, kind
    if pa.types.is_struct(kind):
        for child in kind:
            yield from _walk(f"{name}.{child.name}", child.type)
    elif pa.types.is_map(kind):
        yield from _walk(f"{name}.key", kind.key_type)
        yield from _walk(f"{name}.value", kind.item_type)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or _fixed_list(kind):
        yield from _walk(f"{name}[]", kind.value_type)


def same_columns(caller: str, table: str, have: pa.Schema, given: pa.Schema) -> None:
    """An append adds rows of the table's own columns: a ``SinkError`` naming each difference
    (a missing or extra column, another type) before anything is written."""
    theirs = {f.name: f.type for f in have}
    ours = {f.name: f.type for f in given}
    problems = [f"{n!r} is missing" for n in theirs if n not in ours]
    problems += [f"{n!r} is not in the table" for n in ours if n not in theirs]
    problems += [
        f"{n!r} is {ours[n]} and the table's is {theirs[n]}"
        for n in ours
        if n in theirs and not ours[n].equals(theirs[n])
    ]
    if problems:
        raise SinkError(
            f"{caller}(): the rows do not fit the columns of {table}: {'; '.join(problems)}. "
            "Select and cast the columns to the table's (its columns: "
            f"{', '.join(f'{f.name} {f.type}' for f in have)}), or write with "
            "mode='overwrite' to replace the table; nothing was written"
        )


def _fixed_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_fixed_size_list(kind))
