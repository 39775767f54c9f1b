"""UDFs callable from SQL by name: ``vane.attach_function("sentiment", classifier)``.

The registry is process-wide. A query captures the UDFs it calls when its relation is built, so
detaching a name later does not change a plan already built.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from vane import _engine
from vane.errors import ConfigurationError
from vane.udf.column import ClassInstance, ColumnUdf

_lock = threading.Lock()
_attached: dict[str, ColumnUdf] = {}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a plain SQL identifier; checked, never parsed


def attach_function(name: str, udf: Any) -> None:
    """Make a column UDF callable from SQL as ``name(args)`` in ``vane.sql`` and ``rel.sql``.

    ``udf`` is a ``@vane.func`` function, a method of a ``@vane.cls`` instance
    (``embedder.embed``), or the instance itself (its ``__call__``). Calls still run in the
    UDF's actors, not inside DuckDB.

    >>> import vane
    >>> @vane.func
    ... def shout(text: str) -> str:
    ...     return text.upper()
    >>> vane.attach_function("shout", shout)
    >>> r = vane.from_pydict({"text": ["hi"]})
    >>> vane.sql("SELECT shout(text) AS loud FROM r", r=r).to_pylist()
    [{'loud': 'HI'}]
    >>> vane.detach_function("shout")
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"attach_function(): the name must be a plain SQL identifier, got {name!r}"
        )
    if isinstance(udf, ClassInstance):
        udf = udf.method("__call__")
    if not isinstance(udf, ColumnUdf):
        raise ConfigurationError(
            f"attach_function(): {udf!r} is not a column UDF; decorate a function with "
            "@vane.func, or pass a method of a @vane.cls instance"
        )
    with _engine.scratch() as cursor:
        rows = cursor.execute(
            "SELECT count(*) FROM duckdb_functions() WHERE lower(function_name) = lower(?)",
            [name],
        ).fetchall()
    if rows[0][0]:
        raise ConfigurationError(
            f"attach_function(): DuckDB already has a function named {name!r}; choose another "
            "name so that SQL calling it stays unambiguous"
        )
    with _lock:
        _attached[name.lower()] = udf


def detach_function(name: str) -> None:
    """Forget a name given to ``attach_function``; plans already built keep working."""
    with _lock:
        if _attached.pop(str(name).lower(), None) is None:
            raise ConfigurationError(
                f"detach_function(): no function named {name!r} is attached; attached: "
                f"{', '.join(sorted(_attached)) or 'none'}"
            )


def attached() -> dict[str, ColumnUdf]:
    """A snapshot of the attached UDFs, by lower-case name."""
    with _lock:
        return dict(_attached)
