"""Vane Data: batch inference over tables, streamed from source to sink.

>>> import vane
>>> vane.range(5).filter("id % 2 = 0").count()
3

The public names are loaded on first use (PEP 562), so ``import vane`` costs little and a
worker process, which imports only ``vane.execution.actors``, never loads DuckDB or the planner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vane import errors

if TYPE_CHECKING:
    from vane import functions
    from vane.api import (
        from_arrow,
        from_glob_path,
        from_pandas,
        from_pydict,
        from_pylist,
        range,
        read_csv,
        read_deltalake,
        read_iceberg,
        read_images,
        read_json,
        read_lance,
        read_parquet,
        sql,
    )
    from vane.io.sinks import WriteResult
    from vane.ir.expr import Expr, col, lit, sql_expr
    from vane.relation import Relation
    from vane.session import configure
    from vane.types.files import File
    from vane.udf.attached import attach_function, detach_function
    from vane.udf.decorators import cls, func, method

__version__ = "0.1.0"

# Where each public name lives; ``__getattr__`` imports it the first time it is asked for.
_HOMES = {
    "Expr": "vane.ir.expr",
    "File": "vane.types.files",
    "Relation": "vane.relation",
    "WriteResult": "vane.io.sinks",
    "attach_function": "vane.udf.attached",
    "cls": "vane.udf.decorators",
    "col": "vane.ir.expr",
    "configure": "vane.session",
    "detach_function": "vane.udf.attached",
    "from_arrow": "vane.api",
    "from_glob_path": "vane.api",
    "from_pandas": "vane.api",
    "from_pydict": "vane.api",
    "from_pylist": "vane.api",
    "func": "vane.udf.decorators",
    "lit": "vane.ir.expr",
    "method": "vane.udf.decorators",
    "range": "vane.api",
    "read_csv": "vane.api",
    "read_deltalake": "vane.api",
    "read_iceberg": "vane.api",
    "read_images": "vane.api",
    "read_json": "vane.api",
    "read_lance": "vane.api",
    "read_parquet": "vane.api",
    "sql": "vane.api",
    "sql_expr": "vane.ir.expr",
}

__all__ = [
    "Expr",
    "File",
    "Relation",
    "WriteResult",
    "attach_function",
    "cls",
    "col",
    "configure",
    "detach_function",
    "errors",
    "from_arrow",
    "from_glob_path",
    "from_pandas",
    "from_pydict",
    "from_pylist",
    "func",
    "functions",
    "lit",
    "method",
    "range",
    "read_csv",
    "read_deltalake",
    "read_iceberg",
    "read_images",
    "read_json",
    "read_lance",
    "read_parquet",
    "sql",
    "sql_expr",
]


def __getattr__(name: str) -> Any:
    if name == "functions":  # a module of expressions: vane.functions.decode_image(...)
        module = importlib.import_module("vane.functions")
        globals()[name] = module
        return module
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'vane' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
