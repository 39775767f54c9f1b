"""Helpers for testing code that uses vane: ``assert_table_equal``, and ``OpenAIServer``, a
real OpenAI-compatible HTTP server on 127.0.0.1 with deterministic answers (loaded when first
used; it needs the ``openai`` extra), also runnable as ``python -m vane.testing.server``.

>>> from vane.testing import OpenAIServer
>>> server = OpenAIServer().start()
>>> server.base_url.startswith("http://127.0.0.1:")
True
>>> server.stop()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from vane.testing.server import Behaviour, OpenAIServer, Scripted

__all__ = ["Behaviour", "OpenAIServer", "Scripted", "assert_table_equal"]


def __getattr__(name: str) -> Any:
    if name in ("Behaviour", "OpenAIServer", "Scripted"):
        from vane.testing import server

        return getattr(server, name)
    raise AttributeError(f"module 'vane.testing' has no attribute {name!r}")


def assert_table_equal(actual: Any, expected: Any, *, check_order: bool = True) -> None:
    """Assert two tables (``pa.Table`` or vane ``Relation``) hold the same columns and rows.

    With ``check_order=False`` rows are compared as multisets (sorted by every column).
    """
    from vane.relation import Relation

    left = actual.to_arrow() if isinstance(actual, Relation) else actual
    right = expected.to_arrow() if isinstance(expected, Relation) else expected
    if not isinstance(left, pa.Table) or not isinstance(right, pa.Table):
        raise TypeError("assert_table_equal compares pyarrow Tables or vane Relations")
    if left.schema.names != right.schema.names:
        raise AssertionError(f"columns differ: {left.schema.names} != {right.schema.names}")
    if left.schema != right.schema:
        raise AssertionError(f"schemas differ:\n{left.schema}\n!=\n{right.schema}")
    lrows, rrows = left.to_pylist(), right.to_pylist()
    if not check_order:
        lrows, rrows = sorted(lrows, key=repr), sorted(rrows, key=repr)
    if lrows != rrows:
        first = next(
            (i for i, (a, b) in enumerate(zip(lrows, rrows, strict=False)) if a != b),
            min(len(lrows), len(rrows)),
        )
        raise AssertionError(
            f"tables differ ({len(lrows)} vs {len(rrows)} rows); first difference at row {first}: "
            f"{lrows[first] if first < len(lrows) else '<none>'} != "
            f"{rrows[first] if first < len(rrows) else '<none>'}"
        )
