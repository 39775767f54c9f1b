"""Which UDF-step inputs a resumable write may know batches of by their place in the input
(``vane.execution.resume.input_identity``): only those whose every run gives the same rows in
the same order. Anything else must be known by its values, or a rerun would take an answer
computed for other rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from vane.execution.resume import input_identity
from vane.ir.parse import is_repeatable

# Steps that give the same rows, in the same order, on every run of the same input.
SAME = {
    "filter": lambda rel: rel.filter("id % 3 <> 1"),
    "text": lambda rel: rel.with_column("t", "'row ' || id"),
    "expr": lambda rel: rel.with_column("u", vane.col("id") * 2),
    "select": lambda rel: rel.select("id", "id + 1 AS j"),
    "limit": lambda rel: rel.limit(50),
    "cast": lambda rel: rel.with_column("d", "CAST(id AS VARCHAR)"),
    "zoned": lambda rel: rel.with_column("z", "year(TIMESTAMPTZ '2020-01-01 00:00:00+00')"),
    "case": lambda rel: rel.with_column("k", "CASE WHEN id > 3 THEN 'a' ELSE 'b' END"),
    "macro": lambda rel: rel.with_column("p", "split_part('a,b', ',', 2)"),
}
# Steps whose rows, or their order, may differ from run to run.
OTHER = {
    "random": lambda rel: rel.with_column("r", "random()"),
    "uuid": lambda rel: rel.with_column("q", "uuid()"),
    "now": lambda rel: rel.with_column("n", "now()"),
    "keyword clock": lambda rel: rel.with_column("c", "current_date"),
    "age from today": lambda rel: rel.with_column("a", "age(TIMESTAMP '2020-01-01')"),
    "macro on the clock": lambda rel: rel.with_column("g", "ago(INTERVAL 1 DAY)"),
    "order_by": lambda rel: rel.order_by("id"),
    "distinct": lambda rel: rel.distinct(),
    "union": lambda rel: rel.union(rel),
    "join": lambda rel: rel.join(rel.select("id"), on="id"),
    "window": lambda rel: rel.with_column("w", "row_number() OVER ()"),
    "udf": lambda rel: rel.map_batches(lambda b: b, batch_size=7),
}


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("identity") / "in.parquet"
    pq.write_table(pa.table({"id": list(range(100))}), path)
    return str(path)


def _source(kind: str, parquet: str) -> vane.Relation:
    if kind == "parquet":
        return vane.read_parquet(parquet)
    if kind == "range":
        return vane.range(100)
    return vane.from_pydict({"id": list(range(100))})  # in memory: not in the job's record


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    source=st.sampled_from(["parquet", "range", "memory"]),
    steps=st.lists(st.sampled_from(sorted(SAME) + sorted(OTHER)), max_size=4),
)
def test_only_inputs_every_run_gives_alike_are_known_by_place(parquet, source, steps):
    rel = _source(source, parquet)
    for step in steps:
        rel = {**SAME, **OTHER}[step](rel)
    identity = input_identity(rel.plan)
    alike = source != "memory" and all(step in SAME for step in steps)
    assert (identity is not None) == alike, (source, steps)
    if alike:
        assert identity == input_identity(rel.plan)  # the same on every look


def test_the_identity_changes_with_the_file_and_with_each_expression(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(100))}), path)
    first = input_identity(vane.read_parquet(str(path)).plan)
    pq.write_table(pa.table({"id": list(range(101))}), path)  # rewritten: another size
    assert input_identity(vane.read_parquet(str(path)).plan) != first
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same size, touched
    assert input_identity(vane.read_parquet(str(path)).plan) not in (first, None)

    rel = vane.range(10)
    seen = {
        input_identity(rel.with_column("x", vane.col("id") + 1).plan),
        input_identity(rel.with_column("x", vane.col("id") + 1.0).plan),  # another type
        input_identity(rel.with_column("x", vane.col("id") + 2).plan),
        input_identity(rel.with_column("y", vane.col("id") + 1).plan),
        input_identity(rel.limit(5).plan),
        input_identity(rel.limit(5, offset=1).plan),
        input_identity(vane.range(11).plan),
    }
    assert None not in seen and len(seen) == 7


@pytest.mark.parametrize(
    ("name", "repeatable"),
    [
        ("lower", True),
        ("+", True),
        ("year", True),  # by the session's time zone, which the identity records
        ("coalesce", True),
        ("split_part", True),  # a macro of repeatable functions
        ("random", False),
        ("gen_random_uuid", False),
        ("nextval", False),
        ("now", False),
        ("today", False),
        ("current_setting", False),
        ("age", False),  # age(ts) counts from today, though DuckDB lists it as consistent
        ("ago", False),  # a macro on current_timestamp
        ("no_such_function", False),
    ],
)
def test_functions_are_repeatable_as_the_catalog_says(name, repeatable):
    assert is_repeatable(name) is repeatable


def test_an_object_with_neither_etag_nor_time_is_known_by_its_values() -> None:
    """fsspec's memory filesystem (as an HTTP server without headers) says only a size: not
    enough to know the object again by its place."""
    import fsspec

    memory = fsspec.filesystem("memory")
    with memory.open("/identity/a.parquet", "wb") as out:
        pq.write_table(pa.table({"id": list(range(10))}), out)
    rel = vane.read_parquet("memory://identity/a.parquet")
    assert rel.count() == 10 and input_identity(rel.plan) is None


def test_a_local_file_replaced_with_the_same_size_and_time_is_another_input(tmp_path) -> None:
    # (plain, uncompressed and without statistics: two files of as many ids, one size)
    plain = {"compression": "none", "use_dictionary": False, "write_statistics": False}
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(100))}), path, **plain)
    first = input_identity(vane.read_parquet(str(path)).plan)
    stat = path.stat()
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": list(range(100, 200))}), other, **plain)
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, path)  # as `cp -p` or `rsync -t` of another file would leave it
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert input_identity(vane.read_parquet(str(path)).plan) not in (first, None)


# Another value of each DuckDB setting that decides what a query gives (its values, their
# types as Arrow, their order): a rerun under any of them must not take answers by place.
OTHER_SETTINGS = {
    "TimeZone": "'Asia/Tokyo'",
    "Calendar": "'japanese'",
    "default_collation": "'nocase'",
    "integer_division": "true",
    "ieee_floating_point_ops": "false",
    "default_null_order": "'nulls_first'",
    "arrow_large_buffer_size": "true",
    "arrow_lossless_conversion": "true",
    "arrow_output_list_view": "true",
    "arrow_output_version": "'1.5'",
    "binary_as_string": "true",
    "enable_geoparquet_conversion": "false",
    "produce_arrow_string_view": "true",
}


@pytest.mark.parametrize("name", sorted(OTHER_SETTINGS))
def test_the_identity_changes_with_each_setting_that_decides_what_a_query_gives(name):
    from vane import _engine

    plan = vane.range(10).with_column("x", vane.col("id") + 1).plan
    before = input_identity(plan)
    try:
        _engine.set_global(name, OTHER_SETTINGS[name])
        assert input_identity(plan) not in (before, None)
    finally:
        _engine.set_global(name, None)
    assert input_identity(plan) == before


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York"])
def test_the_settings_are_those_the_process_s_database_opened_with(zone):
    """The settings are asked once, as vane's database opens, not by each write: they must
    be that database's own, which DuckDB takes from the process's environment (the time
    zone), and a plan's identity with them differs from one process's time zone to another's."""
    script = (
        "import json, duckdb, vane\n"
        "from vane import _engine\n"
        "from vane.execution.resume import input_identity\n"
        "plan = vane.range(10).with_column('x', vane.col('id') + 1).plan\n"
        "asked = _engine.result_settings()['TimeZone']\n"
        "own = duckdb.connect().execute(\"SELECT current_setting('TimeZone')\").fetchone()[0]\n"
        "print(json.dumps([asked, own, input_identity(plan)]))\n"
    )

    def run(tz: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "TZ": tz},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)

    asked, own, identity = run(zone)
    assert asked == own == zone
    assert run("UTC")[2] != identity


def test_rows_in_no_fixed_order_are_known_by_their_values():
    from vane import _engine

    plan = vane.range(10).plan
    assert input_identity(plan) is not None
    try:
        _engine.set_global("preserve_insertion_order", "false")
        assert input_identity(plan) is None
    finally:
        _engine.set_global("preserve_insertion_order", None)


def test_the_identity_is_written_as_before_so_a_job_killed_under_an_earlier_vane_resumes():
    """The identity an answer is kept under is hashed from text: the steps below the UDF step,
    each field whole, then DuckDB's settings and the versions (given here, as a rerun's process
    would read them). A change to how that text is written, however harmless it looks, makes a
    job killed under the earlier vane pay again for every batch it had answered: this value is
    the one 4e0101d computes for the same plan and settings, and changes only on purpose."""
    rel = (
        vane.range(100)
        .filter("id % 3 <> 1")
        .with_column("t", "'row ' || id")
        .with_column("u", vane.col("id") * 2)
        .limit(50)
    )
    settings = {
        "preserve_insertion_order": "true",
        "TimeZone": "UTC",
        "(versions)": "duckdb 2.0.1 pyarrow 26.0.1 vane 0.1.0",
    }
    assert input_identity(rel.plan, lambda: settings) == "363203740b972fcbf502"
