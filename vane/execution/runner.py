"""Which runner executes a plan, chosen by ``vane.configure(runner=...)``: ``"local"`` (this
process and its subprocess actors, on the embedded DuckDB) or ``"ray"`` (the same plan lowered
onto Ray Data). Runners load lazily: ``import vane`` never imports Ray."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from vane.config import get_config
from vane.observe.events import EventBus, global_subscribers
from vane.observe.progress import ProgressDisplay, wants_progress

if TYPE_CHECKING:
    from vane.io.resume import Resume
    from vane.io.sinks import Sink, WriteResult
    from vane.plan.nodes import MaterializedScan, PlanNode


class Runner(Protocol):
    """What every runner does with a plan. ``check`` fails before anything runs when the
    runner's machine or cluster cannot give a step what it asks for; ``placement`` says, for
    ``explain()``, where each step runs (by node identity)."""

    name: str

    def check(self, plan: PlanNode) -> None: ...
    def placement(self, plan: PlanNode) -> dict[int, str]: ...
    def to_arrow(self, plan: PlanNode) -> pa.Table: ...
    def count(self, plan: PlanNode) -> int: ...
    def stream(self, plan: PlanNode, batch_size: int | None) -> Iterator[pa.RecordBatch]: ...
    def materialize(self, plan: PlanNode) -> MaterializedScan: ...
    def write(
        self,
        plan: PlanNode,
        sink: Sink,
        *,
        resume: Resume | None = None,
        errors_to: str | None = None,
        errors_key: tuple[str, ...] | None = None,
    ) -> WriteResult: ...


# name -> (module, class); imported the first time the runner is used.
_REGISTRY = {
    "local": ("vane.execution.local", "LocalRunner"),
    "ray": ("vane.execution.ray.runner", "RayRunner"),
}
_instances: dict[str, Runner] = {}


def runner_named(name: str) -> Runner:
    if name not in _instances:
        module, cls = _REGISTRY[name]
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]


def current_runner() -> Runner:
    return runner_named(get_config().runner)


def action_events() -> EventBus:
    """The events of one action: to every subscriber of the process, and to the progress
    display when ``vane.configure(progress=...)`` allows it and stderr is a terminal. Each
    runner's execution installs them as the action starts; the events know no subscriber."""
    events = EventBus()
    for subscriber in global_subscribers():
        events.subscribe(subscriber)
    if wants_progress(get_config().progress):
        display = ProgressDisplay()
        events.subscribe(display)
        events.on_close(display.close)  # a failed stage says nothing more: its lines end here
    return events
