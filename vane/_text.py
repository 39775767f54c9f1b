"""Wording shared by messages, summaries and progress lines."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """A count and its noun, as a sentence says them: "1 row", "2,048 rows", "1 retry"."""
    return f"{count:,} {singular if count == 1 else plural or singular + 's'}"
