"""One suite, both runners: every conformance pipeline (map_batches, map, flat_map, on_error,
SQL around UDF steps, column UDFs, writes) must give the same rows on the local runner and on
a local Ray cluster.

The matrix, runner x backend: on the local runner every case runs on each local backend
(``test_backends.py``: thread, subprocess_actor, subprocess_task; ``ray_actor`` is refused
there); on Ray every case runs with the default backend (``ray_actor``), and the cases that
exercise the actor's lifecycle (a class and its constructor, rows that fail) run under each
local backend name a user may have written for the local runner, which on Ray runs as
a Ray actor hosting the same worker process (docs/ray.md, "What runs where")."""

from __future__ import annotations

import os
import warnings

import pytest

import vane
from tests.conformance.test_backends import CASES, N, double
from tests.integration.test_teardown import Released

pytestmark = pytest.mark.ray


def _rows(build):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # on_error cases warn by design
        return build().to_pylist()


@pytest.mark.parametrize("name", list(CASES))
def test_udf_pipelines_give_the_local_rows_on_ray(name, on_ray):
    case = CASES[name]
    rows = _rows(lambda: case.build(vane.range(N), None))
    if case.ordered:
        assert rows == case.expected
    else:
        assert sorted(rows, key=lambda r: r["id"]) == case.expected


# The cases whose path through an actor differs most: a class and its constructor, on_error.
# (ray_actor, the default on Ray, runs every case above; subprocess_task takes no class on any
# runner.)
LIFECYCLE = ["class_with_constructor_args", "on_error_skip"]


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_every_backend_name_gives_the_local_rows_on_ray(backend, on_ray):
    for name in LIFECYCLE:
        case = CASES[name]
        rows = _rows(lambda case=case: case.build(vane.range(N), backend))
        assert rows == case.expected, f"{name} under execution_backend={backend!r} on Ray"


def test_ray_actor_is_refused_on_the_local_runner():
    from vane.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="runs on a Ray cluster"):
        CASES["function"].build(vane.range(N), "ray_actor")


def gpu_of_actor(batch):
    import os

    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return {"pid": [os.getpid()] * batch.num_rows, "gpu": [devices] * batch.num_rows}


def relational(source: vane.Relation, other: vane.Relation) -> dict[str, list[dict]]:
    """Pipelines mixing UDF steps with steps that need all rows, by name."""
    udf = source.map_batches(double, schema={"id": "BIGINT", "v": "BIGINT"}, batch_size=7)
    return {
        "filter_select_around_udf": udf.filter("v % 3 = 0").select("id", "v + 1 AS w").to_pylist(),
        "join": udf.join(other, on="id").order_by("id").to_pylist(),
        "aggregate": udf.aggregate("sum(v) AS s", group_by="id % 4").order_by("s").to_pylist(),
        "limit": udf.limit(5, offset=3).to_pylist(),
        "self_union": udf.union(udf).order_by("id", "v").to_pylist(),
        "sql": udf.sql("SELECT max(v) AS m FROM rel").to_pylist(),
        "udf_after_aggregate": source.aggregate("count(*) AS id")
        .map_batches(double, schema={"id": "BIGINT", "v": "BIGINT"})
        .to_pylist(),
        "count": [{"n": udf.filter("v > 10").count()}],
        "materialized": udf.materialize().filter("v < 6").to_pylist(),
        "iter_batches": [{"sizes": [b.num_rows for b in udf.iter_batches(16)]}],
    }


def test_relational_steps_around_udf_steps_give_the_local_rows(on_ray):
    other = vane.from_pydict({"id": list(range(0, N, 5)), "tag": [f"t{i}" for i in range(0, N, 5)]})
    on_ray_rows = relational(vane.range(N), other)
    vane.configure(runner="local")
    assert on_ray_rows == relational(vane.range(N), other)


def test_files_in_and_out_on_ray(tmp_path, on_ray):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in"
    source.mkdir()
    for part in range(4):  # files whose schemas differ: the union, as locally
        table = pa.table({"id": list(range(part * 10, part * 10 + 10))})
        if part % 2:
            table = table.append_column("lang", pa.array(["en"] * 10))
        pq.write_table(table, source / f"{part}.parquet")
    rel = vane.read_parquet(source).map_batches(
        lambda b: {"id": b["id"], "lang": b["lang"]},
        schema={"id": "BIGINT", "lang": "VARCHAR"},
        batch_size=8,
    )
    result = rel.write_parquet(tmp_path / "out", partition_by="lang")
    assert result.rows == 40
    back = vane.read_parquet(tmp_path / "out").order_by("id").to_pylist()
    assert [r["id"] for r in back] == list(range(40))
    assert [r["lang"] for r in back][:12] == [None] * 10 + ["en"] * 2
    plain = rel.write_parquet(tmp_path / "plain")
    assert plain.rows == 40 and plain.files >= 1
    assert [r["id"] for r in vane.read_parquet(tmp_path / "plain").to_pylist()] == list(range(40))


def test_four_gpu_actors_see_four_different_devices(on_ray):
    out = vane.range(400).map_batches(
        gpu_of_actor,
        schema={"pid": "BIGINT", "gpu": "VARCHAR"},
        batch_size=10,
        concurrency=4,
        gpus=1,
    )
    assert "4 actor(s) x 0 CPU + 1 GPU" in out.explain()
    devices = {}
    for row in out.to_pylist():
        devices.setdefault(row["pid"], set()).add(row["gpu"])
    assert all(len(seen) == 1 for seen in devices.values())  # one device per actor, always
    owned = [next(iter(seen)) for seen in devices.values()]
    assert len(owned) == len(set(owned))  # no two actors share one
    assert set(owned) <= {"0", "1", "2", "3"}


def test_a_request_the_cluster_cannot_meet_fails_when_the_step_is_built(on_ray):
    from vane.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"5 actors x 1 GPU for `double`.*\(5 vs 4\)"):
        vane.range(3).map_batches(
            double, schema={"id": "BIGINT", "v": "BIGINT"}, concurrency=5, gpus=1
        )
    with pytest.raises(ConfigurationError, match=r"3 actors x 4 CPUs for `double`.*\(13 vs 4\)"):
        vane.range(3).map_batches(
            double, schema={"id": "BIGINT", "v": "BIGINT"}, concurrency=3, cpus=4
        )
    # an autoscaling step fits if its minimum does
    vane.range(3).map_batches(
        double, schema={"id": "BIGINT", "v": "BIGINT"}, concurrency=(1, 8), gpus=1
    )


def raises_on_3(batch):
    if 3 in batch["id"].to_pylist():
        raise KeyError("three")
    return {"id": batch["id"]}


def test_a_udf_error_on_ray_is_the_local_error(on_ray):
    from vane.errors import UDFError

    with pytest.raises(KeyError) as info:
        vane.range(10).map_batches(raises_on_3, schema={"id": "BIGINT"}, batch_size=5).to_arrow()
    error = info.value
    assert isinstance(error, UDFError)
    assert "map_batches step `raises_on_3` raised on input rows 0..4 of a batch of 5" in str(error)
    assert "KeyError: 'three'" in str(error)
    assert isinstance(error.__cause__, KeyError)
    kept = vane.range(10).map_batches(
        raises_on_3, schema={"id": "BIGINT"}, batch_size=5, on_error="skip"
    )
    with pytest.warns(UserWarning, match=r"skipped 1 row .*KeyError: 'three'"):
        rows = kept.to_pylist()
    assert [r["id"] for r in rows] == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def column_udf_pipelines(texts: vane.Relation) -> dict[str, list[dict]]:
    from tests.integration import column_udfs as u

    col = vane.col
    analyzer = u.Analyzer()
    return {
        "funcs": texts.with_column("loud", u.shout(col("text")))
        .with_column("n", u.length(col("text")))
        .filter("n > 3")
        .to_pylist(),
        "class_methods": texts.with_columns(
            {"verdict": analyzer(col("text")), "first": analyzer.first_word(col("text"))}
        ).to_pylist(),
        "on_error_null": texts.with_column("f", u.fragile(col("id"))).to_pylist(),
        "batch_func": texts.with_column("r", u.ratio(col("id"), col("id") + 1)).to_pylist(),
        "generator": texts.with_column("w", u.words(col("text"))).to_pylist(),
    }


def test_column_udfs_give_the_local_rows_on_ray(on_ray):
    def texts():
        return vane.from_pydict(
            {"id": list(range(8)), "text": [f"word {'x' * i} end" for i in range(8)]}
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        on_ray_rows = column_udf_pipelines(texts())
        vane.configure(runner="local")
        assert on_ray_rows == column_udf_pipelines(texts())


@pytest.mark.timeout(300)
def test_a_row_that_kills_its_worker_is_isolated_as_on_the_local_runner(on_ray):
    from tests.integration import udfs
    from vane.errors import ActorDiedError

    def killing(**options):
        return vane.range(20).map_batches(
            udfs.ExitOnRows,
            schema={"id": "BIGINT"},
            batch_size=5,
            fn_constructor_args=((7,),),
            **options,
        )

    with pytest.raises(ActorDiedError, match=r"input rows .* 4 times; vane retries a batch 3"):
        killing().to_arrow()
    with pytest.warns(UserWarning, match=r"skipped 1 row .*input row \d of a batch of \d:") as seen:
        rows = killing(on_error="skip").to_pylist()
    assert [r["id"] for r in rows] == [i for i in range(20) if i != 7]
    assert "1 of them killed or hung their actor" in str(seen[0].message)


@pytest.mark.timeout(300)
def test_batches_with_equal_values_are_not_mistaken_for_retries(on_ray):
    # Ray retries a batch whose actor died; batches that merely hold the same values are
    # different batches, each run once, and none of them "killed" anything.
    rows = (
        vane.from_pydict({"x": ["a"] * 120})
        .map_batches(upper, schema={"x": "VARCHAR"}, batch_size=5, concurrency=2)
        .to_pylist()
    )
    assert rows == [{"x": "A"}] * 120


def upper(batch):
    import pyarrow.compute as pc

    return {"x": pc.utf8_upper(batch["x"])}


def test_ray_steps_emit_the_local_progress_events(on_ray):
    from vane.observe.events import BatchDone, StageFinished, StageStarted, subscribe

    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        rows = vane.range(40).map_batches(
            double, schema={"id": "BIGINT", "v": "BIGINT"}, batch_size=8
        )
        assert len(rows.filter("v % 4 = 0").to_pylist()) == 20
    finally:
        unsubscribe()
    assert [e.step for e in seen if isinstance(e, StageStarted)] == ["double"]
    done = [e for e in seen if isinstance(e, BatchDone)]
    assert sum(e.rows_in for e in done) == 40 and sum(e.rows_out for e in done) == 40
    (finished,) = [e for e in seen if isinstance(e, StageFinished)]
    assert (finished.step, finished.rows_in, finished.rows_out) == ("double", 40, 40)
    assert seen.index(done[-1]) < seen.index(finished)


def test_runner_ray_without_the_extra_names_it(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import vane\n"
        "from vane.errors import MissingDependencyError\n"
        "try:\n"
        "    vane.configure(runner='ray')\n"
        "except MissingDependencyError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'vane-data[ray]'" in out.stdout
    assert vane.configure().runner == "local"


def test_ray_only_options_need_the_ray_runner():
    from vane.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="only apply with runner='ray'"):
        vane.configure(num_cpus=2)


def test_the_seed_ray_example_runs_as_written(on_ray):
    """seeds/002: the GPU actor stage, with execution_backend="ray_actor", gpus=1, concurrency=4
    (the session cluster has 4 logical GPUs)."""
    from tests.integration import udfs

    rel = vane.range(64).select("id", "'text ' || id AS input")
    out = rel.map_batches(
        udfs.ModelBatch,
        schema={"id": "BIGINT", "output": "VARCHAR"},
        batch_size=32,
        execution_backend="ray_actor",
        gpus=1,
        concurrency=4,
    )
    assert out.to_pylist() == [{"id": i, "output": f"TEXT {i}"} for i in range(64)]


class Used(Released):
    """Released, which also leaves ``<pid>-<id>.used`` when it answers its first batch."""

    def __call__(self, batch):
        if not self.batches:
            (self.directory / f"{os.getpid()}-{id(self)}.used").touch()
        return super().__call__(batch)


def _instances(directory) -> dict[str, set[str]]:
    """The UDF instances (``<pid>-<id>``) that were constructed, used, torn down and released."""
    return {
        mark: {p.stem for p in directory.glob(f"*.{mark}")}
        for mark in ("born", "used", "done", "released")
    }


def test_teardown_runs_on_ray_actors_after_their_last_batch(tmp_path, on_ray):
    out = vane.range(60).map_batches(
        Used,
        schema={"id": "BIGINT"},
        batch_size=10,
        concurrency=2,
        fn_constructor_args=(str(tmp_path),),
    )
    assert out.count() == 60
    # Each actor that answered a batch has run teardown() when the action returns, as locally
    # (an actor still starting when the work is done is stopped, as a local one is)
    seen = _instances(tmp_path)
    assert seen["used"] and seen["used"] <= seen["done"]
    # every batch ran before teardown (6 batches of 10 rows)
    assert sum(int((tmp_path / f"{i}.done").read_text()) for i in seen["done"]) == 6


@pytest.mark.parametrize("end", ["count", "limit", "show"])
def test_ray_actors_run_teardown_and_release_the_udf_instance(tmp_path, on_ray, end):
    # Every instance that answered a batch is torn down and let go of by the time the action
    # returns, as locally, however the action ends. How many actors the step had up is the
    # cluster's affair: an action may end before its second has started.
    out = vane.range(600).map_batches(
        Used,
        schema={"id": "BIGINT"},
        batch_size=10,
        concurrency=2,
        fn_constructor_args=(str(tmp_path),),
    )
    if end == "count":
        assert out.count() == 600
    elif end == "limit":
        assert out.limit(5).to_arrow().num_rows == 5
    else:
        out.show(3)
    seen = _instances(tmp_path)
    assert seen["used"] and seen["used"] <= seen["done"] and seen["done"] == seen["released"]


class BrokenModel:
    def __init__(self) -> None:
        raise ValueError("no model file at /nowhere")

    def __call__(self, batch):
        return batch


def test_a_constructor_that_raises_fails_the_action_with_its_error_as_locally(on_ray):
    from vane.errors import UDFError

    rel = vane.range(N).map_batches(BrokenModel, schema={"id": "BIGINT"}, concurrency=2)
    said = r"constructing BrokenModel failed: ValueError: no model file at /nowhere"
    with pytest.raises(ValueError, match=said) as raised:  # catchable as the user's class
        rel.to_pylist()
    assert isinstance(raised.value, UDFError)
    assert isinstance(raised.value.__cause__, ValueError)  # the constructor's, with its traceback


def fails_from_row_4(row: dict) -> dict:
    if row["id"] >= 4:
        raise ValueError(f"cannot score row {row['id']}")
    return row


@pytest.mark.timeout(300)
def test_rows_past_a_limit_never_fail_the_action_on_ray(on_ray):
    # Ray Data's own scenario: ds.map(f).limit(4) gives 4 rows, whatever f does on row 5.
    rel = vane.range(100).map(fails_from_row_4, schema={"id": "BIGINT"}, batch_size=1)
    assert rel.limit(4).to_pylist() == [{"id": i} for i in range(4)]
    assert rel.select("id").limit(2, offset=2).to_pylist() == [{"id": 2}, {"id": 3}]
    with pytest.raises(ValueError, match="cannot score row 4"):  # a row the limit needs
        rel.limit(5).to_pylist()


@pytest.mark.timeout(300)
def test_ai_functions_run_on_ray_each_row_once_with_their_usage(tmp_path, on_ray):
    pytest.importorskip("aiohttp")
    from tests.ai_server import FakeServer, answer_for

    server = FakeServer().start()
    try:
        rel = vane.from_pydict(
            {"id": list(range(30)), "text": [f"question {i}" for i in range(30)]}
        )
        out = rel.prompt("text", model="m", base_url=server.base_url, api_key="k", batch_size=8)
        assert "@ ray: 1 actor(s)" in out.explain(optimized=True)
        result = out.write_parquet(tmp_path / "out")
        rows = vane.read_parquet(tmp_path / "out").order_by("id").to_pylist()
    finally:
        server.stop()
    assert [r["response"] for r in rows] == [answer_for(f"question {i}") for i in range(30)]
    assert server.requests == 30 and set(server.by_prompt.values()) == {1}
    assert result.usage == {
        "prompt[openai m](text)": {"requests": 30, "prompt_tokens": 60, "completion_tokens": 120}
    }


def stalls_on_7(batch):
    import time

    if 7 in batch["id"].to_pylist():
        time.sleep(60)  # a plain call: it cannot be cancelled, only its worker ended
    return {"id": batch["id"]}


@pytest.mark.timeout(300)
def test_a_row_that_hangs_its_worker_is_isolated_on_ray_as_locally(on_ray):
    with pytest.warns(UserWarning, match=r"kept 1 failing row as nulls.*batch_timeout_s"):
        rows = (
            vane.range(12)
            .map_batches(
                stalls_on_7,
                schema={"id": "BIGINT"},
                batch_size=4,
                batch_timeout_s=2,
                on_error="null",
            )
            .to_pylist()
        )
    # the stalled row is kept, null, with its error; its neighbours in the batch were answered
    assert [r["id"] for r in rows] == [*range(7), None, *range(8, 12)]
    assert [i for i, r in enumerate(rows) if r["error"]] == [7]


class OneAtATime:
    """Says, for each batch, whether another call of this instance was running when it began."""

    def __init__(self) -> None:
        import threading

        self.running = threading.Lock()

    def __call__(self, batch):
        import time

        import pyarrow as pa

        overlapped = not self.running.acquire(blocking=False)
        try:
            time.sleep(0.01)
        finally:
            if not overlapped:
                self.running.release()
        return pa.table({"id": batch["id"], "overlapped": [overlapped] * batch.num_rows})


@pytest.mark.timeout(300)
def test_a_plain_function_runs_one_batch_at_a_time_on_its_ray_actor(on_ray):
    # The Ray actor takes two calls at once, so that its worker has the next batch queued;
    # the user's function must still see one batch at a time, and the rows keep their order.
    from vane.execution.ray.lowering import PLAIN_CALLS_PER_ACTOR

    assert PLAIN_CALLS_PER_ACTOR > 1
    rows = (
        vane.range(300)
        .map_batches(OneAtATime, schema={"id": "BIGINT", "overlapped": "BOOLEAN"}, batch_size=5)
        .to_pylist()
    )
    assert [r["id"] for r in rows] == list(range(300))
    assert not any(r["overlapped"] for r in rows)


def slow_double(batch):
    import time

    time.sleep(0.05)
    return double(batch)


async def slow_double_async(batch):
    import asyncio

    await asyncio.sleep(0.05)
    return double(batch)


@pytest.mark.parametrize("fn", [slow_double, slow_double_async], ids=["plain", "async"])
def test_ray_progress_counts_busy_actors_not_calls(on_ray, fn):
    # One actor takes several calls at once on Ray (a plain function's next batch waits in its
    # worker; an async one runs many): the progress line must still say one actor, never more.
    # How many polls land while batches run is the clock's business: every one of them, and the
    # last, must hold; the tally's arithmetic is tested on its own (tests/unit/test_ray_tally.py).
    from vane.observe.events import BatchDone, StageFinished, subscribe

    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        out = vane.range(200).map_batches(fn, schema={"id": "BIGINT", "v": "BIGINT"}, batch_size=5)
        assert out.count() == 200
    finally:
        unsubscribe()
    done = [e for e in seen if isinstance(e, BatchDone)]
    assert done  # the last poll, at the end, at least
    assert all(e.busy_actors <= e.actors <= 1 for e in done), done
    assert sum(e.rows_in for e in done) == 200
    (finished,) = [e for e in seen if isinstance(e, StageFinished)]
    assert finished.rows_in == 200
