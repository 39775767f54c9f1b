"""What a UDF step is: the callable, how it is constructed and called, its resources and its
fault policy. ``vane.udf.build`` checks a verb's arguments and builds one."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from vane.errors import ConfigurationError

Backend = Literal["thread", "subprocess_actor", "subprocess_task", "ray_actor"]
BACKENDS: tuple[str, ...] = ("thread", "subprocess_actor", "subprocess_task", "ray_actor")
OnError = Literal["raise", "skip", "null"]
ON_ERROR: tuple[str, ...] = ("raise", "skip", "null")
Kind = Literal["batch", "row", "flat"]
BatchFormat = Literal["pyarrow", "pandas", "numpy"]
BATCH_FORMATS: tuple[str, ...] = ("pyarrow", "pandas", "numpy")

ERROR_COLUMN = "error"
DEFAULT_MAX_CONCURRENCY_PER_ACTOR = 16
# What a provider's Batch API takes off its live prices (OpenAI's: half).
BATCH_DISCOUNT = 0.5
# Rows per batch handed to a UDF when the step does not say (Ray Data's default too).
DEFAULT_BATCH_SIZE = 1024
# How long an actor may take to construct its UDF: generous, since loading a large model can
# take minutes, but finite, so a constructor that hangs fails the job (Ray Data waits 10 min).
DEFAULT_ACTOR_START_TIMEOUT_S = 600.0


def callable_name(fn: object) -> str:
    if isinstance(fn, functools.partial):
        return callable_name(fn.func)
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def is_async_callable(fn: Any) -> bool:
    """Whether calling ``fn`` (a function, or a class's ``__call__``) gives a coroutine or an
    async generator: such a UDF runs on the actor's event loop."""
    target = fn.__call__ if isinstance(fn, type) else fn
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)


@dataclass(frozen=True)
class Budget:
    """How much a step may spend, by what its UDF counts (``usage_counters``: an AI function's
    ``prompt_tokens`` and ``completion_tokens``): tokens in all, or dollars at ``prices`` (per
    million tokens, ``{"input": ..., "output": ...}``). The stage stops the job once a batch's
    answer takes the step past it; the batches in flight then may add a little more. Tokens
    answered through a provider's Batch API (``batch_prompt_tokens`` and
    ``batch_completion_tokens``, also counted in the totals) cost half the prices, as OpenAI
    bills them."""

    max_cost: float | None = None
    max_total_tokens: int | None = None
    prices: tuple[tuple[str, float], ...] = ()

    def spent(self, usage: Mapping[str, int]) -> tuple[int, float | None]:
        tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        if not self.prices:
            return tokens, None
        prices = dict(self.prices)
        batched = usage.get("batch_prompt_tokens", 0), usage.get("batch_completion_tokens", 0)
        prompt = usage.get("prompt_tokens", 0) - BATCH_DISCOUNT * batched[0]
        completion = usage.get("completion_tokens", 0) - BATCH_DISCOUNT * batched[1]
        cost = (prompt * prices.get("input", 0.0) + completion * prices.get("output", 0.0)) / 1e6
        return tokens, cost

    def __vane_identity__(self) -> str:
        """A resumable write's rerun with a larger budget is the same job, going on."""
        return "a budget"

    def exceeded(self, usage: Mapping[str, int]) -> bool:
        tokens, cost = self.spent(usage)
        if self.max_total_tokens is not None and tokens > self.max_total_tokens:
            return True
        return self.max_cost is not None and cost is not None and cost > self.max_cost


@dataclass(frozen=True, eq=False)
class UdfSpec:
    """A user's function or class and how vane runs it.

    ``kind`` is ``"batch"`` (a table in, a table out), ``"row"`` (a dict in, a dict out) or
    ``"flat"`` (a dict in, a list of dicts out); the row kinds are adapted to batches inside
    the actor, so every backend runs batches.
    """

    fn: Any
    verb: str
    kind: Kind = "batch"
    batch_size: int | None = None
    # At most this many bytes of input per batch as well (decoded images: a batch of 4K frames
    # holds few of them); a row larger than this is a batch of its own.
    batch_bytes: int | None = None
    backend: Backend = "thread"
    min_actors: int = 1
    max_actors: int = 1
    gpus: float = 0
    cpus: float | None = None
    memory: int | None = None
    constructor_args: tuple[Any, ...] = ()
    constructor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    fn_args: tuple[Any, ...] = ()
    fn_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # What a batch UDF is given: a pa.Table, a pandas DataFrame or a dict of numpy arrays.
    batch_format: BatchFormat = "pyarrow"
    max_concurrency_per_actor: int = DEFAULT_MAX_CONCURRENCY_PER_ACTOR
    max_retries: int = 0
    on_error: OnError = "raise"
    preserve_order: bool = True
    # The input columns shipped to the actors (None: all of them).
    reads: tuple[str, ...] | None = None
    # Output = the input columns, carried past the actors and joined back by position, then
    # the UDF's columns: one output row per input row. Such a step is row-wise by contract,
    # which lets the optimizer move filters and projections on input columns below it.
    passthrough: bool = False
    # Seconds one attempt at a batch may take (None: no limit); see docs/map_batches.md.
    batch_timeout_s: float | None = None
    # Seconds an actor may take to construct the UDF (None: no limit).
    actor_start_timeout_s: float | None = DEFAULT_ACTOR_START_TIMEOUT_S
    # What explain() and messages call the step (default: the callable's name).
    label: str | None = None
    # The column on_error="null" adds with each failing row's error text.
    error_column: str = ERROR_COLUMN
    # The column a user sees that error text in: the same column for the UDF verbs; for a
    # column UDF the step's column is the optimizer's own, shown under the UDF's
    # ``error_column`` if it names one (None: kept by nobody, and messages say how to keep it).
    error_shown_as: str | None = ERROR_COLUMN
    # What the step may spend (None: no limit).
    budget: Budget | None = None
    # Why the step's actors run on the driver's machine, on Ray too (None: anywhere).
    driver_node: str | None = None

    @property
    def is_class(self) -> bool:
        return isinstance(self.fn, type)

    @property
    def is_async(self) -> bool:
        return is_async_callable(self.fn)

    @property
    def rows_per_batch(self) -> int:
        return self.batch_size or DEFAULT_BATCH_SIZE

    @property
    def name(self) -> str:
        return self.label or callable_name(self.fn)


def output_schema(spec: UdfSpec, declared: pa.Schema) -> pa.Schema:
    """The step's output: the declared columns, plus ``error`` when failing rows become nulls."""
    if spec.on_error != "null":
        return declared
    if spec.error_column in declared.names:
        raise ConfigurationError(
            f"{spec.verb}(): on_error='null' adds a column {spec.error_column!r} with each "
            "failing row's error, and the schema already has one; rename that column, or pass "
            "error_column='another_name'"
        )
    return declared.append(pa.field(spec.error_column, pa.string()))
