"""A resumable write's saved answers (``vane/io/resume.py``): an answer is taken back exactly
as it was put, and one that came back damaged (torn by a crash of the machine, cut short,
overwritten) is never taken: it reads as missing, so its batch is computed again."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vane.io.resume import ResumeStore

META = {"rows_skipped": 1, "errors": [[3, "ValueError: no", 2]]}


def _store(root: Path) -> ResumeStore:
    store = ResumeStore(str(root / "out"), "write_parquet")
    store.open({"plan": "p", "steps": {}, "inputs": {}}, restart=False)
    return store


@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=50))
def test_an_answer_comes_back_as_it_was_put(tmp_path_factory, values):
    store = _store(tmp_path_factory.mktemp("store"))
    table = pa.table({"id": pa.array(values, pa.int64()), "s": [str(v) for v in values]})
    store.put("step", "d1", table, META)
    saved = store.get("step", "d1")
    assert saved is not None
    assert saved.table.equals(table) and saved.table.schema.metadata is None
    assert saved.meta == META


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: data[:100] + bytes(len(data) - 100),  # zeroed after its first bytes
        # Its values zeroed, its footer whole: an IPC reader takes it, the CRC does not.
        lambda data: data[:400] + bytes(4_000) + data[4_400:],
        lambda data: data[:-12],  # the trailer gone: an answer written without one
        lambda data: b"",
    ],
)
def test_a_damaged_answer_reads_as_missing(tmp_path, damage):
    store = _store(tmp_path)
    store.put("step", "d1", pa.table({"id": list(range(1_000))}), META)
    path = store.path / "step" / "d1.arrow"
    path.write_bytes(damage(path.read_bytes()))
    assert store.get("step", "d1") is None
    store.put("step", "d1", pa.table({"id": [7]}), {})  # computed again, and put over it
    saved = store.get("step", "d1")
    assert saved is not None and saved.table["id"].to_pylist() == [7]
