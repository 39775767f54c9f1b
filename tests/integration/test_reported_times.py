"""The seconds an action reports cover its work: a write's ``seconds``, each step's, the time its
function spent in calls (``busy_seconds``), and the total of ``explain(analyze=True)``, on every
backend and runner, whatever kind of UDF step it runs.

No clock decides these tests: a UDF waits at a gate (``udfs.wait_at_gate``) that the test opens
only after seeing the step begin and waiting a while itself, so the step surely ran through the
span the test measured. Every figure that covers the step must be at least that span, and a
whole at least each of its parts.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vane
from tests.integration import column_udfs, udfs
from vane import col

BACKENDS = ["thread", "subprocess_actor"]


def through_gate(tmp_path: Path, action: Callable[[str], Any]) -> tuple[Any, float]:
    """``action(gate)``'s result, and a span of time the test measured while the action's UDF
    was waiting at the gate (so the UDF step, and the action, ran through all of it)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = action(str(gate))
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        while not (gate / "started").exists():
            assert thread.is_alive(), f"the action ended before its step began: {outcome}"
            time.sleep(0.005)
        seen = time.perf_counter()
        time.sleep(0.3)  # a span the step is held through: how long does not matter
        opened = time.perf_counter()
    finally:
        (gate / "open").touch()
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], opened - seen


def steps(backend: str, gate: str) -> dict[str, Callable[[vane.Relation], vane.Relation]]:
    """One relation per kind of UDF step, each of which waits at ``gate``."""
    process = backend != "thread"
    func = vane.func(use_process=process)(column_udfs.value_at_gate)
    model = vane.cls(use_process=process)(column_udfs.ModelAtGate)(gate)
    return {
        "with_column(func)": lambda r: r.with_column("v", func(col("id"), gate)),
        "select(func)": lambda r: r.select("id", func(col("id"), gate).alias("v")),
        "with_column(cls)": lambda r: r.with_column("v", model(col("id"))),
        # a step DuckDB runs on the UDF's whole output before the first row is written
        "with_column(func).order_by": lambda r: r.with_column("v", func(col("id"), gate)).order_by(
            "id"
        ),
        "map_batches": lambda r: r.map_batches(
            udfs.Gated,
            schema={"id": "BIGINT"},
            fn_constructor_args=(gate,),
            execution_backend=backend,
        ),
    }


KINDS = list(steps("thread", "").keys())


def check_write(result: vane.WriteResult, held: float) -> None:
    (step,) = result.steps
    assert result.rows == 20
    assert step.seconds >= held, (step, held)
    assert step.busy_seconds >= held, (step, held)  # the function was in a call all along
    assert result.seconds >= step.seconds, result
    assert "s in the function)" in str(step), step


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_reports_the_time_its_steps_ran(tmp_path, backend, kind):
    def write(gate: str) -> vane.WriteResult:
        rel = steps(backend, gate)[kind](vane.range(20))
        return rel.write_parquet(str(tmp_path / "out.parquet"))

    check_write(*through_gate(tmp_path, write))


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_analyze_reports_a_total_that_covers_its_steps(tmp_path, backend):
    def analyze(gate: str) -> str:
        rel = steps(backend, gate)["with_column(func).order_by"](vane.range(20))
        return rel.explain(analyze=True)

    text, held = through_gate(tmp_path, analyze)
    (total,) = re.findall(r"-- ran in ([\d.]+) s, 20 rows", text)
    (step,) = re.findall(r"20 rows in, 20 out, ([\d.]+) s", text)
    # both said to 2 decimals: rounding keeps their order, and costs at most 0.005 s
    assert float(total) >= float(step) >= held - 0.005, text


def test_an_ai_function_in_with_column_reports_the_time_of_its_requests(tmp_path):
    from vane.ai import prompt
    from vane.testing import OpenAIServer
    from vane.testing.server import Behaviour

    server = OpenAIServer(Behaviour(latency=0.3)).start()  # each answer waits this long, at least
    try:
        rel = vane.from_pydict({"id": [1, 2], "text": ["a", "b"]}).with_column(
            "answer",
            prompt(col("text"), model="m", base_url=server.base_url, api_key="k"),
        )
        result = rel.write_parquet(str(tmp_path / "out.parquet"))
    finally:
        server.stop()
    (step,) = result.steps
    assert step.usage["requests"] == 2
    assert result.seconds >= step.seconds >= 0.3, result


@pytest.mark.ray
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["with_column(func)", "with_column(func).order_by"])
def test_a_write_on_ray_reports_the_time_its_steps_ran(tmp_path, on_ray, kind):
    def write(gate: str) -> vane.WriteResult:
        rel = steps("subprocess_actor", gate)[kind](vane.range(20))
        return rel.write_parquet(str(tmp_path / "out.parquet"))

    check_write(*through_gate(tmp_path, write))


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_each_step_on_ray_reports_its_own_time(tmp_path, on_ray):
    # The second step starts once the first has answered every row (a sort between them, on
    # the driver): each step's time is its own, so together they fit in the action's, which
    # an action's time given to each step would not.
    opened = tmp_path / "opened"
    opened.mkdir()
    (opened / "open").touch()

    def write(gate: str) -> vane.WriteResult:
        func = vane.func(column_udfs.value_at_gate)
        rel = (
            vane.range(20)
            .with_column("v", func(col("id"), gate))
            .order_by("id")
            .with_column("w", func(col("id"), str(opened)))
        )
        return rel.write_parquet(str(tmp_path / "out.parquet"))

    result, held = through_gate(tmp_path, write)
    first, second = sorted(result.steps, key=lambda s: s.step_id)
    assert first.seconds >= held
    assert result.seconds >= first.seconds + second.seconds, result
