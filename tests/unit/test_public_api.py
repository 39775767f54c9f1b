from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vane

PUBLIC = [
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
    "PIL",
    "typer",
    "rich",
    "lance",
    "pyiceberg",
    "deltalake",
]


def fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter, where nothing is imported yet."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_vane_imports_nothing_heavy():
    code = f"import sys, vane\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    assert fresh_python(code) == "[]"


def test_public_names_load_on_first_use():
    code = (
        "import sys, vane\n"
        "before = 'vane.relation' in sys.modules\n"
        "from vane import read_parquet, func\n"
        "print(before, 'vane.relation' in sys.modules, callable(read_parquet), callable(func))"
    )
    assert fresh_python(code).split() == ["False", "True", "True", "True"]
    assert set(PUBLIC) <= set(dir(vane))
    assert vane.range is vane.range  # cached after the first lookup
    with pytest.raises(AttributeError, match="no attribute 'read_parket'"):
        vane.read_parket  # noqa: B018


def test_worker_process_does_not_load_duckdb_or_the_planner():
    """A subprocess actor imports only what runs a UDF: starting one is paid per worker."""
    code = (
        "import sys\n"
        "import vane.execution.actors._worker\n"
        "print(sorted(m for m in ('duckdb', 'vane.plan', 'vane.relation', 'vane.api', 'asyncio') "
        "if m in sys.modules))"
    )
    assert fresh_python(code) == "[]"


def test_a_plain_udf_runs_without_loading_asyncio():
    """asyncio (20-50 ms to import) is loaded for async functions only."""
    code = (
        "import sys, vane\n"
        "vane.configure(progress=False)\n"
        "rel = vane.range(10).map_batches(lambda t: t, schema={'id': 'BIGINT'})\n"
        "assert rel.count() == 10\n"
        "print('asyncio' in sys.modules)"
    )
    assert fresh_python(code) == "False"


def test_a_first_result_loads_only_what_it_runs(tmp_path):
    """The first result of a plain job pays for no module it does not use: pyarrow.compute
    (~40 ms), HTTP and TLS for File.open (~12 ms), the file and image functions; the writes'
    sinks, commits and resume (~25 ms), and subprocess (~5 ms); column UDFs' calls, which a batch
    UDF does not make."""
    path = tmp_path / "ten.parquet"
    pq.write_table(pa.table({"id": list(range(10)), "text": ["a"] * 10}), path)
    unused = (
        *("pyarrow.compute", "http.client", "urllib.request", "vane.functions"),
        *("vane.io.sinks", "vane.io.resume", "vane.io.parts", "vane.io.ledger"),
        *("vane.execution.resume", "vane.execution.write_setup", "ctypes.util", "subprocess"),
        *("vane.udf.column", "vane.udf.column_calls", "vane.udf.attached"),
    )
    code = (
        "import sys, vane\n"
        "vane.configure(progress=False)\n"
        f"rel = vane.read_parquet({str(path)!r}).map_batches(\n"
        "    lambda b: b, schema={'id': 'BIGINT', 'text': 'VARCHAR'})\n"
        "assert next(iter(rel.iter_batches(10))).num_rows == 10\n"
        f"print([m for m in {unused!r} if m in sys.modules])"
    )
    assert fresh_python(code) == "[]"
