"""Which answers a resumable write keeps in its log where the output is kept in parts
(``Checkpoint.keeps``): a paid call's always, a quick call's only when the call cost far more
than keeping its answer (``io/parts.worth_keeping``), decided per call of a unit."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from vane.execution.resume import Checkpoint
from vane.io.parts import KEEP_BYTES_PER_SECOND, KEEP_RATIO, KEEP_SECONDS
from vane.udf.runtime import BatchOutcome


def _checkpoint(*, parts: bool, paid: bool = False) -> Checkpoint:
    checkpoint = Checkpoint.__new__(Checkpoint)  # (no store: keeps reads none)
    checkpoint.parts = object() if parts else None  # type: ignore[assignment]
    checkpoint.paid = paid
    return checkpoint


@given(
    rows=st.integers(0, 5_000),
    seconds=st.floats(0, 0.05, allow_nan=False),
    calls=st.integers(0, 8),
    usage=st.booleans(),
    paid=st.booleans(),
)
def test_an_answer_is_kept_as_its_call_s_cost_and_its_size_say(rows, seconds, calls, usage, paid):
    table = pa.table({"x": pa.array(range(rows), pa.int64())})
    outcome = BatchOutcome(table, seconds=seconds, usage={"requests": 1} if usage else {})
    per_call = max(1, calls)
    worth = seconds / per_call >= KEEP_RATIO * (
        KEEP_SECONDS + table.get_total_buffer_size() / per_call / KEEP_BYTES_PER_SECOND
    )
    assert _checkpoint(parts=True, paid=paid).keeps(outcome, calls) == (paid or usage or worth)
    assert _checkpoint(parts=False).keeps(outcome, calls)  # no parts: every answer is kept
