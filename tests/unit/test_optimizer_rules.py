"""Golden tests, one rule at a time: each optimizer rule applied alone (after the rules before
it in ``RULES``, as ``optimize`` applies them) to a small plan, and the plan it gives, as
``explain`` draws it, compared line for line; and for each rule a plan it must leave alone.
A change to a rule shows here as a changed picture, not as a slower job somewhere else."""

from __future__ import annotations

import vane
from vane import col
from vane.plan.explain import explain
from vane.plan.nodes import PlanNode
from vane.plan.optimizer import RULES

RULE = {rule.__name__: rule for rule in RULES}


@vane.func
def score(text: str) -> float:
    return float(len(text))


@vane.cls
class Model:
    def __call__(self, text: str) -> str:
        return text.upper()

    @vane.method
    def size(self, text: str) -> int:
        return len(text)


def rows() -> vane.Relation:
    return vane.from_pydict({"id": [1, 2], "text": ["a", "bb"], "extra": [0, 1]})


def before(name: str, plan: PlanNode) -> PlanNode:
    """``plan`` with the rules that run before ``name`` applied, in their order."""
    for rule in RULES:
        if rule.__name__ == name:
            return plan
        plan = rule(plan)
    raise AssertionError(f"no rule {name}")


def picture(name: str, rel: vane.Relation) -> tuple[str, str]:
    plan = before(name, rel.plan)
    return explain(plan), explain(RULE[name](plan))


UDF = "backend=thread batch_size=default concurrency=1"


def test_the_rules_run_in_this_order():
    assert list(RULE) == [
        "merge_shared_calls",
        "lift_udf_calls",
        "pushdown_filters",
        "prune_columns",
    ]


def test_merge_shared_calls_puts_two_steps_of_one_instance_together():
    model = Model()
    rel = rows().with_column("up", model(col("text"))).with_column("n", model.size(col("text")))
    was, now = picture("merge_shared_calls", rel)
    assert was.count("WithColumn") == 2
    assert now.splitlines() == [
        f"WithColumn up = Model(text), n = Model.size(text)  [Model, Model.size: {UDF}]",
        "  FromArrow rows=2",
    ]


def test_merge_shared_calls_leaves_a_step_that_reads_the_other_alone():
    model = Model()
    rel = rows().with_column("up", model(col("text"))).with_column("n", model.size(col("up")))
    was, now = picture("merge_shared_calls", rel)
    assert now == was


def test_lift_udf_calls_turns_a_call_into_a_pass_through_step():
    _, now = picture("lift_udf_calls", rows().with_column("s", score(col("text"))))
    assert now.splitlines() == [
        "Drop __vane_udf_0",
        "  WithColumn s = __vane_udf_0",
        f"    Udf score(text) -> input + [__vane_udf_0] {UDF} reads=[text]",
        "      FromArrow rows=2",
    ]


def test_lift_udf_calls_leaves_a_plan_without_calls_alone():
    was, now = picture("lift_udf_calls", rows().with_column("s", "length(text)"))
    assert now == was


def test_pushdown_filters_runs_a_filter_on_input_columns_before_the_step():
    rel = rows().with_column("s", score(col("text"))).filter("id > 1")
    was, now = picture("pushdown_filters", rel)
    assert was.splitlines()[0] == "Filter id > 1"
    assert now.splitlines() == [
        "Drop __vane_udf_0",
        "  WithColumn s = __vane_udf_0",
        f"    Udf score(text) -> input + [__vane_udf_0] {UDF} reads=[text]",
        "      Filter id > 1",
        "        FromArrow rows=2",
    ]


def test_pushdown_filters_keeps_a_filter_on_the_steps_output_above_the_step():
    rel = rows().with_column("s", score(col("text"))).filter("s > 1")
    _, now = picture("pushdown_filters", rel)
    assert now.splitlines() == [  # below the Drop of the hidden column, no further
        "Drop __vane_udf_0",
        "  Filter s > 1",
        "    WithColumn s = __vane_udf_0",
        f"      Udf score(text) -> input + [__vane_udf_0] {UDF} reads=[text]",
        "        FromArrow rows=2",
    ]


def test_prune_columns_ships_only_the_columns_the_plan_still_needs():
    rel = rows().with_column("s", score(col("text"))).select("id", "s")
    _, now = picture("prune_columns", rel)
    assert now.splitlines() == [
        "Select id, s",
        "  Drop __vane_udf_0",
        "    WithColumn s = __vane_udf_0",
        f"      Udf score(text) -> input + [__vane_udf_0] {UDF} reads=[text]",
        "        Select id, text",
        "          FromArrow rows=2",
    ]


def test_prune_columns_leaves_a_plan_that_needs_every_column_alone():
    was, now = picture("prune_columns", rows().with_column("s", score(col("text"))))
    assert now == was


def test_map_batches_is_opaque_to_every_rule():
    rel = rows().map_batches(
        lambda b: b, schema={"id": "BIGINT", "text": "VARCHAR", "extra": "BIGINT"}
    )
    rel = rel.filter("id > 1").select("id")
    for name in RULE:
        was, now = picture(name, rel)
        assert now == was, name
