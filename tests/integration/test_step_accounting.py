"""A UDF step's accounting on both runners (``vane.execution.accounting``): the same pipeline,
whose function fails on some rows, says the same things on the local runner and on Ray: the
on_error warning, the write's step summaries and usage, ``explain(analyze=True)``'s notes.
Only the times differ."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pyarrow as pa
import pytest

import vane
from vane.io.sinks import WriteResult


class ScoresOrFails:
    """Fails on every row whose id is ``remainder`` more than a multiple of 7, with one text
    for all (so the first error is the same whichever batch answers first), and counts the
    rows it scored: on success only, so the count does not depend on how batches were cut."""

    def __init__(self, remainder: int) -> None:
        self.remainder = remainder
        self.scored = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        if any(i % 7 == self.remainder for i in ids):
            raise ValueError("cannot score this row")
        self.scored += len(ids)
        return pa.table({"id": batch["id"], "score": [i * 10 for i in ids]})

    def usage_counters(self) -> dict[str, int]:
        return {"rows_scored": self.scored}


def _pipeline() -> vane.Relation:
    """Two steps of one class: the first skips its failing rows, the second keeps its own as
    nulls."""
    schema = {"id": "BIGINT", "score": "BIGINT"}
    return (
        vane.range(42)
        .map_batches(
            ScoresOrFails, schema=schema, batch_size=8, on_error="skip", fn_constructor_args=(3,)
        )
        .map_batches(
            ScoresOrFails, schema=schema, batch_size=8, on_error="null", fn_constructor_args=(5,)
        )
    )


def _timeless(text: str) -> str:
    return re.sub(r"\d+\.\d\d s\b", "_ s", text)


def _run(out: str) -> tuple[list[str], WriteResult, str]:
    rel = _pipeline()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rel.write_parquet(out)
        plan = rel.explain(analyze=True)  # (warns again)
    said = [str(w.message) for w in caught if "step `" in str(w.message)]
    return said, result, plan


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_step_says_the_same_on_the_local_runner_and_on_ray(tmp_path, on_ray):
    vane.configure(runner="local")
    local_said, local, local_plan = _run(str(tmp_path / "local"))
    vane.configure(runner="ray")
    ray_said, on_ray_, ray_plan = _run(str(tmp_path / "ray"))

    skipped = (
        "map_batches step `ScoresOrFails` skipped 6 rows on which the function failed; "
        "first error: ValueError: cannot score this row"
    )
    nulled = (
        "map_batches step `ScoresOrFails` kept 6 failing rows as nulls, with the error text in "
        "column 'error'; first error: ValueError: cannot score this row"
    )
    assert sorted(local_said) == sorted([skipped, nulled] * 2)  # the write's, explain's
    assert ray_said == local_said

    def summaries(result: WriteResult) -> list[object]:
        return [
            dataclasses.replace(s, seconds=0.0, busy_seconds=0.0, step_id=0) for s in result.steps
        ]

    assert summaries(on_ray_) == summaries(local)
    # each runner timed its function's calls (the Ray actors' reach the driver's tally)
    assert all(s.busy_seconds > 0 for s in [*local.steps, *on_ray_.steps])
    assert on_ray_.usage == local.usage
    assert local.usage == {
        "ScoresOrFails": {"rows_scored": 36},
        "ScoresOrFails #2": {"rows_scored": 30},
    }
    for summary in (_timeless(s.summary()) for s in local.steps):
        assert summary in _timeless(local_plan) and summary in _timeless(ray_plan)
