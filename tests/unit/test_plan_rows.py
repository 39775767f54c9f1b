"""The rows a plan gives, as the plan alone says (``vane.plan.rows.known_rows``): the totals of
the progress display. A count it gives must be the count the plan runs to, for any plan; and
the steps that keep each row as one (or cap the rows, as a limit does) must keep it known."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane.plan.optimizer import optimize
from vane.plan.rows import known_rows


@dataclass(frozen=True)
class Step:
    name: str
    apply: Callable[[vane.Relation], vane.Relation]
    keeps_count: bool  # the count stays known through it (a limit caps it)

    def __repr__(self) -> str:
        return self.name


def _steps() -> st.SearchStrategy[Step]:
    limits = st.builds(
        lambda n, offset: Step(f"limit({n}, {offset})", lambda r: r.limit(n, offset), True),
        st.integers(0, 30),
        st.integers(0, 10),
    )
    filters = st.integers(2, 5).map(
        lambda k: Step(f"filter(id % {k})", lambda r: r.filter(f"id % {k} = 0"), False)
    )
    fixed = st.sampled_from(
        [
            Step("with_column", lambda r: r.with_column("x", "id + 1").drop("x"), True),
            Step("select", lambda r: r.select("id"), True),
            Step("rename", lambda r: r.rename({"id": "k"}).rename({"k": "id"}), True),
            Step("order_by", lambda r: r.order_by("id", descending=True), True),
            Step("union itself", lambda r: r.union(r), True),
            Step("materialize", lambda r: r.materialize(), True),
            Step("unnest", lambda r: r.select("id", "unnest([1, 2]) AS u").drop("u"), False),
            Step("unlist", lambda r: r.select("id", "unlist([1, 2]) AS u").drop("u"), False),
            Step(  # a macro over unnest
                "generate_subscripts",
                lambda r: r.select("id", "generate_subscripts([1, 2], 1) AS u").drop("u"),
                False,
            ),
            Step("nullif (a macro)", lambda r: r.with_column("x", "nullif(id, 3)").drop("x"), True),
            Step("window", lambda r: r.select("id", "row_number() OVER () AS n").drop("n"), False),
            Step("join", lambda r: r.join(vane.range(7), on="id"), False),
            Step("distinct", lambda r: r.distinct(), False),
            Step("aggregate", lambda r: r.aggregate("count(*) AS id"), False),
            Step("sql", lambda r: r.sql("SELECT * FROM rel LIMIT 3"), False),
        ]
    )
    return st.one_of(limits, filters, fixed)


def _source(kind: str, sizes: list[int], folder: Path) -> tuple[vane.Relation, bool]:
    """A relation of ``sum(sizes)`` rows with a BIGINT column ``id``, and whether its size is
    known without reading it."""
    rows = sum(sizes)
    if kind == "range":
        return vane.range(rows), True
    if kind == "pydict":
        return vane.from_pydict({"id": list(range(rows))}), True
    start = 0
    for number, size in enumerate(sizes):
        table = pa.table({"id": pa.array(range(start, start + size), pa.int64())})
        start += size
        if kind == "parquet":  # several row groups to a file, as big files have
            pq.write_table(table, folder / f"part-{number}.parquet", row_group_size=7)
        else:
            with open(folder / f"part-{number}.csv", "w") as out:
                out.write("id\n" + "".join(f"{v}\n" for v in table["id"].to_pylist()))
    if kind == "parquet":
        return vane.read_parquet(folder), True
    return vane.read_csv(folder, types={"id": "BIGINT"}), False


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["range", "pydict", "parquet", "csv"]),
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    steps=st.lists(_steps(), max_size=4),
)
def test_a_known_count_is_the_count_the_plan_runs_to(kind, sizes, steps):
    with tempfile.TemporaryDirectory() as folder:
        rel, known_source = _source(kind, sizes, Path(folder))
        for step in steps:
            rel = step.apply(rel)
        known = known_rows(rel.plan)
        if known_source and all(step.keeps_count for step in steps):
            assert known is not None, steps
        if known is not None:
            assert known == rel.count(), steps
        optimized = known_rows(optimize(rel.plan))
        if optimized is not None:
            assert optimized == rel.count(), steps
