"""SQL text helpers shared by every layer that writes SQL for DuckDB (plan, io, execution).

They sit below the plan layer so that io and execution need not import the plan to quote a name
or to quote DuckDB's own error text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# DuckDB lists every overload of a function it could not match: dozens of lines that bury the
# sentence that matters.
_NOISE = "Candidate functions:"
_MAX_MESSAGE = 600
# DuckDB's advice when a query needs an extension (httpfs for a URL, excel for read_xlsx...):
# INSTALL it, or SET autoinstall_known_extensions. vane's DuckDB loads no extension (that would
# download code while a query runs, or hang without a network) and sql() refuses INSTALL and
# SET, so the advice cannot be followed: vane says what can be done instead.
_EXTENSION_ADVICE = re.compile(r"\s*Please try installing and loading the (\w+) extension.*", re.S)
_REMOTE_FILES = (
    ". vane's DuckDB loads no extension, httpfs included: read remote files with vane's "
    "readers, which go through its storage layer (rel = vane.read_parquet('s3://bucket/x/'), "
    "then vane.sql('SELECT ... FROM rel', rel=rel))"
)


# A Python exception raised inside a callback DuckDB made (a remote filesystem's read, say)
# comes back with its whole traceback in DuckDB's message: only its last line says anything.
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):.*?\n(?=\S)(?!\s*File )", re.S)


def duckdb_message(exc: BaseException) -> str:
    """DuckDB's own text on one line (it names the missing column, the bad token...), without
    its list of candidate overloads, advice that does not apply in vane, or the traceback of a
    Python callback it ran, and cut to a readable length."""
    text = _TRACEBACK.sub("", str(exc))
    if _NOISE in text:
        text = text[: text.index(_NOISE)].rstrip() + " (candidate functions omitted)"
    advice = _EXTENSION_ADVICE.search(text)
    if advice is not None:
        extension = advice.group(1)
        text = text[: advice.start()].rstrip(" .:")
        text += (
            _REMOTE_FILES
            if extension == "httpfs"
            else f". vane's DuckDB loads no extension, so what the {extension} extension "
            "provides cannot be used; read or compute this another way"
        )
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def quote_ident(name: str) -> str:
    """A column name as a quoted SQL identifier: any name works, quotes included."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A string as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_list(items: Iterable[str]) -> str:
    return ", ".join(items)
