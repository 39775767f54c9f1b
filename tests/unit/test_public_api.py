from __future__ import annotations

import subprocess
import sys

import vane

PUBLIC = [
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


def test_public_names_are_pinned_and_sorted():
    assert vane.__all__ == PUBLIC == sorted(PUBLIC)
    for name in PUBLIC:
        assert hasattr(vane, name)


HEAVY = [
    "torch",
    "ray",
    "openai",
    "aiohttp",
    "transformers",
    "vllm",
    "sentence_transformers",
    "pandas",
    "typer",
    "rich",
]


def test_import_vane_imports_nothing_heavy():
    code = f"import sys, vane\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
