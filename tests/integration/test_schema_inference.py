"""map_batches, map and flat_map without schema=: the step's schema is what its first output
batch holds, learned when the plan first needs it (one more run of the first batch), and every
batch of the real run is checked against it as against a declared one (Ray Data infers too, so
its code ports without a schema per step)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from vane.errors import SchemaError, SchemaMismatchError, UDFError

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
