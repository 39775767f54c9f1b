"""What a pipeline's AI functions will ask for, before it runs: ``rel.estimate()``.

For each AI step (``prompt``, ``embed_text``, ``classify_text``, ``embed_image``,
``classify_image``) it reads the step's input as
the step would (the plan below the step, which must hold no UDF step of its own: those would
have to run), renders each row's request as the step renders it (the template filled, the
system prompt added), and counts:

- requests: one per row with a value (a null row is not sent), capped by a ``limit`` above;
- input tokens: with the model's own tokenizer where it is on this machine (a transformers or
  vLLM model, a sentence-transformers model), else about four characters a token, as the rate
  limiter counts them; ``Estimate`` says which;
- an image (``embed_image``, ``classify_image``, a prompt's ``images=``) as about
  ``IMAGE_TOKENS`` (256) input tokens, as the rate limiter counts it before the reply says
  (OpenAI's vision models take 85 to 765 by detail); an embedding model on this machine
  embeds one batch of images per request;
- output tokens, at most: ``max_tokens`` times the requests, where ``max_tokens`` is given;
- cost, where ``prices`` are given in dollars per million tokens (``{"input": 0.15, "output":
  0.60}``); without ``max_tokens`` the output's cost is unknown and the cost covers the input.
  A step with ``mode="batch"`` is priced at half, as the Batch API bills (what a batch leaves
  unanswered and is asked live would cost more).

Nothing is sent to a model, and nothing is cached: the estimate reads and renders only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vane._text import counted
from vane.ai.functions import check_prices
from vane.ai.limits import IMAGE_TOKENS
from vane.ai.providers._models import source
from vane.ai.runners import (
    ClassifyByEmbeddingRunner,
    ClassifyImageRunner,
    EmbedImageRunner,
    EmbedTextRunner,
    PromptRunner,
    RemoteEmbedImageRunner,
    RemoteEmbedTextRunner,
    prompts_of,
)
from vane.config import get_config
from vane.errors import ConfigurationError
from vane.execution.lowering import row_caps
from vane.execution.runner import current_runner
from vane.ir.expr import Column
from vane.plan.nodes import Limit, PlanNode, Select, UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import walk
from vane.udf.spec import BATCH_DISCOUNT

_TASKS: dict[type, str] = {
    PromptRunner: "prompt",
    EmbedTextRunner: "embed_text",
    RemoteEmbedTextRunner: "embed_text",
    ClassifyByEmbeddingRunner: "classify_text",
    EmbedImageRunner: "embed_image",
    RemoteEmbedImageRunner: "embed_image",
    ClassifyImageRunner: "classify_image",
}
_IMAGE_TASKS = {"embed_image", "classify_image"}
# a request per row (or per image) rather than per batch of rows
_PER_ROW = {PromptRunner, RemoteEmbedImageRunner}
APPROXIMATE = "about 4 characters a token"
_LOCAL = {"transformers", "vllm", "sentence_transformers"}


@dataclass(frozen=True)
class StepEstimate:
    """One AI step: what it will send, and what that costs where prices are given."""

    step: str
    task: str
    model: str
    requests: int
    input_tokens: int
    tokens_counted: str  # "the model's tokenizer" or APPROXIMATE
    max_output_tokens: int | None  # max_tokens x requests; None where max_tokens is not given
    cost: float | None  # dollars; None without prices

    def summary(self) -> str:
        text = (
            f"{self.step}: {counted(self.requests, 'request')}, "
            f"{self.input_tokens:,} input tokens ({self.tokens_counted})"
        )
        if self.max_output_tokens is not None:
            text += f", at most {self.max_output_tokens:,} output tokens"
        if self.cost is not None:
            text += f", ${self.cost:,.4f}"
        return text


@dataclass(frozen=True)
class Estimate:
    """Every AI step's estimate; ``cost`` sums those that have one."""

    steps: tuple[StepEstimate, ...]

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.steps)

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps)

    @property
    def cost(self) -> float | None:
        costs = [s.cost for s in self.steps if s.cost is not None]
        return sum(costs) if costs else None

    def __str__(self) -> str:
        if not self.steps:
            return "no AI function in this pipeline: nothing to send"
        lines = [s.summary() for s in self.steps]
        if self.cost is not None and len(self.steps) > 1:
            lines.append(f"in all: ${self.cost:,.4f}")
        return "\n".join(lines)


def estimate(plan: PlanNode, prices: Mapping[str, float] | None = None) -> Estimate:
    """``plan``'s AI steps, estimated (see the module's text)."""
    prices = check_prices(prices, "estimate")
    plan = optimize(plan)
    caps = row_caps(plan)
    found = []
    for node in walk(plan):
        if not isinstance(node, UdfStep):
            continue
        owner, calls = _ai_call(node)
        if owner is None:
            continue
        below = [n for n in walk(node.input) if isinstance(n, UdfStep)]
        if below:
            raise ConfigurationError(
                f"estimate(): the input of `{node.udf.name}` comes from the UDF step "
                f"`{below[0].udf.name}`, which would have to run to know it. Estimate the "
                "pipeline up to that step's output, written first (write_parquet), and read "
                "from there"
            )
        for call in calls:
            found.append(_step(node, owner, call, caps.get(id(node)), prices))
    return Estimate(tuple(found))


def _ai_call(node: UdfStep) -> tuple[Any, tuple[Any, ...]]:
    """The recorded runner instance and its calls, for a lifted AI function's step."""
    args = node.udf.constructor_args
    if len(args) != 2:
        return None, ()
    owner, calls = args
    cls = getattr(owner, "cls", None)
    if cls not in _TASKS:
        return None, ()
    return owner, tuple(calls)


def _step(
    node: UdfStep,
    owner: Any,
    call: Any,
    cap: int | None,
    prices: Mapping[str, float] | None,
) -> StepEstimate:
    task = _TASKS[owner.cls]
    descriptor = owner.args[0]
    options = dict(owner.kwargs)
    provider = str(getattr(descriptor, "provider", ""))
    model = str(getattr(descriptor, "model", ""))
    source: PlanNode = Select(node.input, tuple(Column(c) for c in call.columns))
    if cap is not None:
        source = Limit(source, cap)
    rows = list(_rows(source, task, options))
    counter, how = _counter(provider, model)
    system = options.get("system")
    extra = counter(system) if task == "prompt" and system else 0
    per_row = owner.cls in _PER_ROW
    requests = len(rows) if per_row else _batches(len(rows), node.udf.rows_per_batch)
    tokens = sum(counter(text) + extra + IMAGE_TOKENS * images for text, images in rows)
    if any(images for _, images in rows):
        how = f"{how}; images at about {IMAGE_TOKENS} tokens each"
    generation = dict(getattr(descriptor, "generation", {}) or {})
    max_tokens = generation.get("max_tokens") if task == "prompt" else None
    output = int(max_tokens) * len(rows) if isinstance(max_tokens, int) else None
    cost = None
    if prices is not None:
        cost = tokens * prices["input"] / 1e6
        if output is not None:
            cost += output * prices.get("output", 0.0) / 1e6
        if getattr(getattr(descriptor, "settings", None), "mode", "live") == "batch":
            cost *= 1 - BATCH_DISCOUNT
    return StepEstimate(
        step=call.udf.name,
        task=task,
        model=model,
        requests=requests,
        input_tokens=tokens,
        tokens_counted=how,
        max_output_tokens=output,
        cost=cost,
    )


def _rows(source: PlanNode, task: str, options: Mapping[str, Any]) -> Iterable[tuple[str, int]]:
    """Each row the step sends, as its text and how many images it carries; a row the step would
    not send (a null) is left out. An image step's row is one image and no text."""
    images, files = int(options.get("images") or 0), int(options.get("files") or 0)
    for batch in current_runner().stream(source, get_config().batch_size):
        columns = batch.columns
        if task in _IMAGE_TASKS:
            yield from (("", 1) for value in columns[0].to_pylist() if value is not None)
            continue
        end = len(columns) - images - files
        if task == "prompt":
            prompts, _ = prompts_of(options.get("template"), columns[:end])
        else:
            prompts, _ = prompts_of(None, columns[:1])
        attached = [c.to_pylist() for c in columns[end : end + images]]
        for row, prompt in enumerate(prompts):
            if prompt is not None:
                yield prompt, sum(column[row] is not None for column in attached)


def _batches(rows: int, size: int) -> int:
    return math.ceil(rows / size) if rows else 0


def _counter(provider: str, model: str) -> tuple[Any, str]:
    """A token counter for ``model``: its own tokenizer where this machine has it."""
    if provider in _LOCAL and model:
        try:
            from transformers import AutoTokenizer

            # a hub id that an installed package ships is read from that package's files
            tokenizer = AutoTokenizer.from_pretrained(source(model), local_files_only=True)
        except Exception:  # not installed, not on this machine, or not a transformers model
            tokenizer = None
        if tokenizer is not None:
            return (lambda text: len(tokenizer.encode(text))), "the model's tokenizer"
    return (lambda text: math.ceil(len(text) / 4)), APPROXIMATE
