"""Vane Data: batch inference over tables, streamed from source to sink.

>>> import vane
>>> vane.range(5).filter("id % 2 = 0").count()
3
"""

from __future__ import annotations

from vane import errors
from vane.api import (
    from_arrow,
    from_pandas,
    from_pydict,
    from_pylist,
    range,
    read_csv,
    read_json,
    read_parquet,
    sql,
)
from vane.config import configure
from vane.io.sinks import WriteResult
from vane.plan.expr import Expr, col, lit, sql_expr
from vane.relation import Relation
from vane.udf.attached import attach_function, detach_function
from vane.udf.decorators import cls, func, method

__version__ = "0.1.0"

__all__ = [
    "Expr",
    "Relation",
    "WriteResult",
    "attach_function",
    "cls",
    "col",
    "configure",
    "detach_function",
    "errors",
    "from_arrow",
    "from_pandas",
    "from_pydict",
    "from_pylist",
    "func",
    "lit",
    "method",
    "range",
    "read_csv",
    "read_json",
    "read_parquet",
    "sql",
    "sql_expr",
]
