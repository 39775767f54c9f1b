"""UDF steps: a function of the user's over batches of rows, with its declared or inferred
output schema, and how ``explain()`` shows the way it runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from vane.errors import PlanError
from vane.plan.nodes.base import PlanNode, check_columns
from vane.udf.spec import UdfSpec, output_schema

_step_ids = itertools.count(1)

# UDF steps


_VERB_KIND = {"map_batches": "MapBatches", "map": "Map", "flat_map": "FlatMap", "udf": "Udf"}


class InferredSchema:
    """A UDF step's output schema when the user gave none: learned from the step's first output
    batch by ``probe`` (which runs it), the first time the plan needs it, and kept."""

    def __init__(self, probe: Callable[[], pa.Schema]) -> None:
        self._probe = probe
        self._schema: pa.Schema | None = None

    @property
    def known(self) -> bool:
        return self._schema is not None

    def resolve(self) -> pa.Schema:
        if self._schema is None:
            self._schema = self._probe()
        return self._schema


@dataclass(frozen=True, eq=False)
class UdfStep(PlanNode):
    """A user's function or class run over batches of its input by an actor pool. Its output is
    the declared schema (plus an ``error`` column with ``on_error="null"``); without one, the
    schema of its first output batch, learned when the plan first needs it.

    ``step_id`` is the step's identity, given when it is built and kept when the optimizer
    rebuilds it over other inputs: two steps of one function share a name, never an id, and
    events, summaries and ``explain(analyze=True)`` tell them apart by it."""

    input: PlanNode
    udf: UdfSpec
    declared: pa.Schema | InferredSchema
    step_id: int = field(default_factory=lambda: next(_step_ids))

    def __post_init__(self) -> None:
        spec = self.udf
        if spec.reads is not None:
            check_columns(spec.verb, spec.reads, self.input)
        if isinstance(self.declared, pa.Schema):
            self._derive()

    @property
    def schema(self) -> pa.Schema:
        if "_schema" not in self.__dict__:
            self._derive()  # runs the first batch, once
        return super().schema

    @property
    def declared_schema(self) -> pa.Schema:
        """The columns the function returns, as declared or as learned from its output."""
        declared = self.declared
        return declared.resolve() if isinstance(declared, InferredSchema) else declared

    def _derive(self) -> None:
        spec = self.udf
        names = self.input.schema.names
        produced = output_schema(spec, self.declared_schema)
        if spec.passthrough:
            clash = [n for n in produced.names if n in names]
            if clash:
                raise PlanError(
                    f"{spec.verb}(): output column(s) {clash} would shadow input columns of the "
                    "same name; choose other output names, or drop those input columns first"
                )
            produced = pa.schema(list(self.input.schema) + list(produced))
        self._set_schema(produced)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def row_local(self) -> bool:
        return True  # each batch is answered on its own

    def describe(self) -> str:
        spec = self.udf
        fields = execution_fields(
            backend=spec.backend,
            batch_size=spec.batch_size,
            actors=(spec.min_actors, spec.max_actors),
            gpus=spec.gpus,
            cpus=spec.cpus,
            memory=spec.memory,
            is_async=spec.is_async,
            async_limit=f"max_concurrency_per_actor={spec.max_concurrency_per_actor}",
            max_retries=spec.max_retries,
            on_error=spec.on_error,
            batch_timeout_s=spec.batch_timeout_s,
            preserve_order=spec.preserve_order,
        )
        if spec.reads is not None:
            fields.append(f"reads=[{', '.join(spec.reads)}]")
        declared = self.declared
        if isinstance(declared, InferredSchema) and not declared.known:
            columns = "schema of its first output batch"
        else:
            columns = ", ".join(self.declared_schema.names)
        keeps = "input + " if spec.passthrough else ""
        return f"{_VERB_KIND.get(spec.verb, 'Udf')} {spec.name} -> {keeps}[{columns}] " + " ".join(
            fields
        )


def execution_fields(
    *,
    backend: str,
    batch_size: int | None,
    actors: tuple[int, int],
    gpus: float = 0,
    cpus: float | None = None,
    memory: int | None = None,
    is_async: bool = False,
    async_limit: str = "",
    max_retries: int = 0,
    on_error: str = "raise",
    batch_timeout_s: float | None = None,
    preserve_order: bool = True,
) -> list[str]:
    """How a UDF step runs, as ``explain()`` shows it: backend, batch size and actors always,
    the other options when they differ from their defaults. One format for ``map_batches``
    steps and for column UDF calls before the optimizer lifts them into steps."""
    low, high = actors
    fields = [
        f"backend={backend}",
        f"batch_size={batch_size or 'default'}",
        f"concurrency={low if low == high else f'({low}, {high})'}",
    ]
    if gpus:
        fields.append(f"gpus={gpus:g}")
    if cpus:
        fields.append(f"cpus={cpus:g}")
    if memory:
        fields.append(f"memory={memory}")
    if is_async:
        fields.append(f"async {async_limit}".rstrip())
    if max_retries:
        fields.append(f"max_retries={max_retries}")
    if on_error != "raise":
        fields.append(f"on_error={on_error}")
    if batch_timeout_s is not None:
        fields.append(f"batch_timeout_s={batch_timeout_s:g}")
    if not preserve_order:
        fields.append("preserve_order=False")
    return fields
