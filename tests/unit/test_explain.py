"""explain() before optimizing: a step that calls column UDFs says how each UDF step it will
become runs, exactly as the lifted step says it (backend, batch size, actors, GPUs, retries,
failures, timeout), one bracket per step-to-be, the same text every time."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane import col


class Model:
    def __call__(self, x: int) -> int:
        return x

    @vane.method.batch(return_dtype="BIGINT")
    def twice(self, x):
        return x


def plus_one(x: int) -> int:
    return x + 1


async def later(x: int) -> int:
    return x


def _bracket(line: str) -> list[str]:
    """The fields of the line's UDF brackets, each bracket's own list."""
    return [part.split(": ", 1)[1].split() for part in re.findall(r"\[([^\[\]]+)\]", line)]


def _fields(line: str) -> list[str]:
    """A lifted step's fields, without what the plan before lifting cannot know (the hidden
    columns it reads) or names otherwise (how many calls an actor overlaps)."""
    fields = re.sub(r" reads=\[[^\]]*\]", "", line).split("] ", 1)[1].split()
    return [f for f in fields if not f.startswith("max_concurrency")]


def _lifted(plan: str) -> list[str]:
    return [line.strip() for line in plan.splitlines() if line.strip().startswith("Udf ")]


options = st.fixed_dictionaries(
    {
        "batch_size": st.none() | st.integers(1, 5000),
        "max_retries": st.integers(0, 3),
        "on_error": st.sampled_from(["raise", "null", "skip"]),
        "batch_timeout_s": st.none() | st.sampled_from([0.5, 3, 120.25]),
        "use_process": st.booleans(),
    }
)


@settings(max_examples=40, deadline=None)
@given(
    common=options,
    gpus=st.sampled_from([0, 0.5, 1, 2]),
    actors=st.none() | st.integers(1, 4) | st.tuples(st.integers(1, 2), st.integers(3, 5)),
)
def test_a_class_call_shows_the_options_its_lifted_step_runs_with(common, gpus, actors):
    udf = vane.cls(gpus=gpus, max_concurrency=actors, **common)(Model)()
    rel = vane.range(3).with_columns({"a": udf(col("id")), "b": udf.twice(col("id") + 1)})
    line = rel.explain().splitlines()[0]
    (shown,) = _bracket(line)  # both calls on one instance: one step
    assert line.endswith("  [Model, Model.twice: " + " ".join(shown) + "]")
    (step,) = _lifted(rel.explain(optimized=True))
    assert shown == _fields(step)
    assert rel.explain() == rel.explain()


@settings(max_examples=40, deadline=None)
@given(common=options, fn=st.sampled_from([plus_one, later]), rows=st.none() | st.integers(1, 99))
def test_a_function_call_shows_the_options_its_lifted_step_runs_with(common, fn, rows):
    udf = vane.func(return_dtype="BIGINT", max_concurrency=rows, **common)(fn)
    rel = vane.range(3).filter(udf(col("id")) > 1)
    (shown,) = _bracket(rel.explain().splitlines()[0])
    (step,) = _lifted(rel.explain(optimized=True))
    assert [f for f in shown if not f.startswith("max_concurrency")] == _fields(step)
    if fn is later:  # how many rows an async function has in flight per actor
        assert f"max_concurrency={rows or 64}" in shown
    else:
        assert not any(f.startswith(("async", "max_concurrency")) for f in shown)


def test_each_step_to_be_has_its_bracket_in_order():
    first, second = vane.cls(batch_size=8)(Model)(), vane.cls(gpus=1)(Model)()
    shout = vane.func(plus_one)
    rel = (
        vane.range(3)
        .select("id", shout(col("id")).alias("s"))
        .order_by(first(col("id")))
        .with_columns({"a": second(col("id")), "b": first.twice(col("s"))})
    )
    assert rel.explain() == (
        "WithColumn a = Model(id), b = Model.twice(s)"
        "  [Model: backend=subprocess_actor batch_size=default concurrency=1 gpus=1]"
        "  [Model.twice: backend=thread batch_size=8 concurrency=1]\n"
        "  OrderBy Model(id)  [Model: backend=thread batch_size=8 concurrency=1]\n"
        "    Select id, plus_one(id) AS s  [plus_one: backend=thread batch_size=default "
        "concurrency=1]\n"
        "      Range n=3"
    )


def test_steps_without_udf_calls_are_unchanged():
    rel = vane.range(3).with_column("x", col("id") + 1).filter("x > 1")
    assert rel.explain() == "Filter x > 1\n  WithColumn x = (id + 1)\n    Range n=3"
