"""map_batches, map and flat_map without schema=: the step's schema is what its first output
batch holds, learned when the plan first needs it (one more run of the first batch), and every
batch of the real run is checked against it as against a declared one (Ray Data infers too, so
its code ports without a schema per step)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane.errors import SchemaError, SchemaMismatchError, SourceError, UDFError

BACKENDS = ["thread", "subprocess_actor"]


class CountsConstructions:
    """Appends a line to a file each time an instance is built (in whatever process)."""

    def __init__(self, log: str) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")

    def __call__(self, batch: pa.Table) -> dict[str, object]:
        ids = batch["id"].to_pylist()
        return {"id": ids, "half": [i / 2 for i in ids], "tag": [f"t{i}" for i in ids]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_map_batches_learns_its_schema_from_its_first_batch(tmp_path: Path, backend):
    log = tmp_path / "built.txt"
    out = vane.range(10).map_batches(
        CountsConstructions,
        fn_constructor_args=(str(log),),
        batch_size=4,
        execution_backend=backend,
    )
    assert "schema of its first output batch" in out.explain()
    assert "not known until its first batch runs" in repr(out)
    assert not log.exists()  # nothing ran to build or show the relation
    assert out.schema == pa.schema(
        [("id", pa.int64()), ("half", pa.float64()), ("tag", pa.string())]
    )
    assert len(log.read_text().splitlines()) == 1  # the probe: one construction
    assert "-> [id, half, tag]" in out.explain()
    rows = out.filter("id > 6").to_pylist()
    assert rows == [{"id": i, "half": i / 2, "tag": f"t{i}"} for i in (7, 8, 9)]
    assert len(log.read_text().splitlines()) == 2  # and the run itself: the schema is kept


def half_then_text(batch: pa.Table) -> dict[str, object]:
    ids = batch["id"].to_pylist()
    return {"v": [i / 2 for i in ids] if ids[0] == 0 else [str(i) for i in ids]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_later_batches_are_checked_against_the_learned_schema(backend):
    out = vane.range(8).map_batches(half_then_text, batch_size=4, execution_backend=backend)
    with pytest.raises(
        SchemaMismatchError, match=r"column 'v' as VARCHAR, but DOUBLE was declared"
    ):
        out.to_arrow()


def test_map_and_flat_map_learn_from_rows_too():
    rows = vane.range(3).map(lambda r: {"id": r["id"], "sq": r["id"] ** 2})
    assert rows.columns == ["id", "sq"]
    assert rows.to_pylist()[2] == {"id": 2, "sq": 4}
    flat = vane.range(2).flat_map(lambda r: [{"x": float(r["id"])}] * 2)
    assert flat.schema == pa.schema([("x", pa.float64())])
    assert flat.count() == 4


def test_what_cannot_be_learned_says_to_pass_a_schema():
    with pytest.raises(SchemaError, match="no rows to learn one from; pass schema="):
        _ = vane.range(3).filter("id > 5").map_batches(lambda b: b).schema
    with pytest.raises(SchemaError, match=r"only nulls in column\(s\) \['n'\].*pass schema="):
        _ = vane.range(3).map_batches(lambda b: {"n": [None] * b.num_rows}).schema
    with pytest.raises(UDFError) as failed:
        _ = vane.range(3).map_batches(lambda b: 1 / 0).schema
    assert "learn its output schema; pass schema= to skip it" in "".join(failed.value.__notes__)


@pytest.mark.ray
def test_on_ray_the_schema_is_learned_too(on_ray):
    out = vane.range(6).map_batches(
        lambda b: {"id": b["id"], "s": [str(i) for i in b["id"].to_pylist()]}
    )
    assert out.columns == ["id", "s"]
    assert out.to_pylist()[5] == {"id": 5, "s": "5"}


def _stream(sizes: list[int]) -> pa.RecordBatchReader:
    schema = pa.schema([("id", pa.int64())])
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return pa.RecordBatchReader.from_batches(
        schema,
        (
            pa.record_batch([pa.array(range(s, s + n))], schema=schema)
            for s, n in zip(starts, sizes, strict=True)
        ),
    )


def _doubled(batch: pa.Table) -> dict[str, object]:
    return {"id": batch["id"], "twice": pa.compute.multiply(batch["id"], 2)}


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 7), min_size=1, max_size=12).filter(lambda s: sum(s) > 0),
    batch_size=st.integers(1, 9),
    action=st.sampled_from(["to_arrow", "iter_batches", "write_parquet", "count", "schema"]),
    where=st.sampled_from(["", "id % 3 <> 1"]),
)
def test_a_stream_read_once_gives_its_first_rows_to_the_probe_and_to_the_run(
    tmp_path_factory, sizes, batch_size, action, where
):
    # The probe that learns the schema reads the reader's first rows: they are kept and given
    # again to the action, so every row comes once, in order (not an "already read" error).
    rel = vane.from_arrow(_stream(sizes))
    if where:
        rel = rel.filter(where)
    out = rel.map_batches(_doubled, batch_size=batch_size)
    ids = [i for i in range(sum(sizes)) if not where or i % 3 != 1]
    if not ids:
        with pytest.raises(SchemaError, match="no rows to learn one from"):
            _ = out.schema
        return
    assert out.columns == ["id", "twice"]
    expected = [{"id": i, "twice": 2 * i} for i in ids]
    if action == "to_arrow":
        assert out.to_pylist() == expected
    elif action == "iter_batches":
        assert [r for b in out.iter_batches(2) for r in b.to_pylist()] == expected
    elif action == "write_parquet":
        folder = tmp_path_factory.mktemp("out") / "out"
        out.write_parquet(folder)
        assert vane.read_parquet(folder).to_pylist() == expected
    elif action == "count":
        assert out.count() == len(expected)
    else:  # the schema, then a second action: the stream is read by one action only
        out.to_arrow()
        with pytest.raises(SourceError, match="can be read once"):
            out.to_arrow()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stream_read_once_learns_the_schema_on_each_backend(backend):
    out = vane.from_arrow(_stream([3, 4, 5])).map_batches(
        _doubled, batch_size=2, execution_backend=backend
    )
    assert out.to_pylist() == [{"id": i, "twice": 2 * i} for i in range(12)]


@pytest.mark.ray
def test_on_ray_a_stream_read_once_learns_the_schema_too(on_ray, monkeypatch):
    out = vane.from_arrow(_stream([3, 4, 5])).map_batches(_doubled, batch_size=2)
    assert out.to_pylist() == [{"id": i, "twice": 2 * i} for i in range(12)]
    # Two steps without schema=: the second's probe runs the first on Ray, whose read of the
    # stream would take all of it; the probe keeps at most PEEK_BYTES, and sees the stream end
    # there. The run reads every row once all the same.
    from vane.plan.nodes import sources

    pulled = []
    schema = pa.schema([("id", pa.int64())])

    def batches():
        for start in range(0, 400, 10):  # forty batches, eight times what the probe may keep
            pulled.append(start)
            yield pa.record_batch([pa.array(range(start, start + 10))], schema=schema)

    monkeypatch.setattr(sources, "PEEK_BYTES", 5 * 80)  # five batches of 10 BIGINTs
    stream = vane.from_arrow(pa.RecordBatchReader.from_batches(schema, batches()))
    out = stream.map_batches(_doubled, batch_size=4).map_batches(
        lambda b: {"id": b["id"], "half": pa.compute.divide(b["twice"], 2)}, batch_size=4
    )
    assert out.columns == ["id", "half"]
    assert len(pulled) <= 5
    assert out.to_arrow()["id"].to_pylist() == list(range(400))
