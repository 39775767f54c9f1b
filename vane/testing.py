"""Helpers for testing code that uses vane."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


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
