"""``prompt``, ``embed_text``, ``embed_image``, ``classify_text``, ``classify_image``:
expressions over columns.

Each builds a column UDF call whose class is a runner (``runners.py``) constructed once per
actor from a provider's descriptor; the optimizer lifts it into a pass-through step like any
other column UDF, so only the argument columns travel and every other column stays with its
row. Execution options (``batch_size``, ``concurrency``, ``execution_backend``,
``gpus_per_actor``, ``on_error``) are taken out of ``**options``; the rest go to the provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from vane.ai import registry
from vane.ai.runners import (
    ClassifyByEmbeddingRunner,
    ClassifyImageRunner,
    EmbedImageRunner,
    EmbedTextRunner,
    PromptRunner,
    RemoteEmbedImageRunner,
    RemoteEmbedTextRunner,
    Template,
)
from vane.ai.structured import OutputFormat, output_format
from vane.errors import ConfigurationError
from vane.ir.expr import Expr, FunctionCall, Literal, col
from vane.udf.column import ClassInstance, ClassUdf, UdfOptions, make_column_udf
from vane.udf.spec import Budget

_EXECUTION = (
    "batch_size",
    "concurrency",
    "execution_backend",
    "gpus_per_actor",
    "on_error",
    "error_column",
    "max_cost",
    "max_total_tokens",
    "prices",
)
DEFAULT_BATCH_SIZE = {
    "prompt": 256,
    "embed_text": 64,
    "embed_image": 32,
    "classify_text": 64,
    "classify_image": 32,
}
# prompt(mode="batch"): the rows of one provider batch (OpenAI takes up to 50,000 requests and
# 200 MB in one; each of the 16 calls an actor runs at once is one batch).
BATCH_MODE_BATCH_SIZE = 10_000


def _column(value: Any, where: str) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, str) and value:
        return col(value)
    raise ConfigurationError(f"{where}() takes a column name or an expression, got {value!r}")


def _attachments(given: Expr | str | Sequence[Expr | str] | None) -> list[Expr]:
    """``prompt``'s ``images=`` or ``files=``: one column or a list of them."""
    if given is None:
        return []
    listed = [given] if isinstance(given, (str, Expr)) else list(given)
    return [_column(value, "prompt") for value in listed]


def _default_provider(options: Mapping[str, Any], otherwise: str) -> str:
    """The OpenAI-compatible provider for a server vane started (``server=``), else
    ``otherwise``."""
    return "openai" if options.get("server") is not None else otherwise


def _remote(provider: str) -> bool:
    """Whether ``provider`` is an OpenAI-compatible server (requests, not a model in the actor)."""
    return provider in registry.PROVIDERS and registry.PROVIDERS[provider][0].endswith(".openai")


def _split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    if options.get("server") is not None and options.get("gpus_per_actor"):
        raise ConfigurationError(
            "gpus_per_actor goes to vane.ai.serve(...), not to a step that uses its server: the "
            "server holds the GPUs, and the step's actors need none (set their concurrency for "
            "the CPU work alone)"
        )
    execution = {k: v for k, v in options.items() if k in _EXECUTION}
    provider = {k: v for k, v in options.items() if k not in _EXECUTION}
    return execution, provider


def check_prices(prices: Any, caller: str) -> Mapping[str, float] | None:
    """``prices`` as budgets and estimates take them: dollars per million tokens, ``input``
    given, ``output`` optional, none negative."""
    if prices is not None and (
        not isinstance(prices, Mapping)
        or "input" not in prices
        or set(prices) - {"input", "output"}
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in prices.values()
        )
    ):
        raise ConfigurationError(
            f"{caller}(): prices are dollars per million tokens, as {{'input': 0.15, 'output': "
            f"0.60}} ('output' may be left out), got {prices!r}"
        )
    return prices


def _budget(task: str, execution: Mapping[str, Any]) -> Budget | None:
    """``max_cost`` (dollars, at ``prices`` per million tokens) and ``max_total_tokens``
    (prompt and completion tokens together, over the whole step): the job stops once the
    step's answers pass either (see ``Budget``)."""
    max_cost, max_tokens = execution.get("max_cost"), execution.get("max_total_tokens")
    prices = check_prices(execution.get("prices"), task)
    if max_cost is None and max_tokens is None:
        return None
    if max_cost is not None and (prices is None or not isinstance(max_cost, (int, float))):
        raise ConfigurationError(
            f"{task}(): max_cost={max_cost!r} needs the model's prices to count dollars: pass "
            "prices={'input': ..., 'output': ...} in dollars per million tokens (or cap the "
            "tokens with max_total_tokens=)"
        )
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0
    ):
        raise ConfigurationError(
            f"{task}(): max_total_tokens must be a positive number of tokens, got {max_tokens!r}"
        )
    return Budget(
        max_cost=None if max_cost is None else float(max_cost),
        max_total_tokens=max_tokens,
        prices=tuple(sorted((k, float(v)) for k, v in (prices or {}).items())),
    )


def _call(
    task: str,
    runner: type,
    descriptor: Any,
    args: Sequence[Expr],
    *,
    return_type: pa.DataType,
    execution: Mapping[str, Any],
    runner_options: Mapping[str, Any],
) -> Expr:
    """A column UDF call of ``runner``'s batch method ``run`` on ``args``."""
    gpus = execution.get("gpus_per_actor") or descriptor.resources().get("gpus", 0)
    route = getattr(getattr(descriptor, "settings", None), "route", None)
    via = f" via {route.name}" if route is not None else ""  # a server per node (server=)
    options = UdfOptions(
        budget=_budget(task, execution),
        batch_size=execution.get("batch_size") or DEFAULT_BATCH_SIZE[task],
        max_concurrency=execution.get("concurrency") or 1,
        gpus=gpus,
        max_retries=0,  # providers retry each request themselves
        on_error=execution.get("on_error", "raise"),
        backend=execution.get("execution_backend"),
        error_column=execution.get("error_column"),
        driver_node=execution.get("driver_node"),
    )
    instance = ClassInstance(ClassUdf(runner, options), (descriptor,), dict(runner_options))
    udf = make_column_udf(
        runner.run,  # type: ignore[attr-defined]
        name=f"{task}[{descriptor.provider} {descriptor.model}{via}]",
        return_dtype=return_type,
        batch=True,
        options=options,
        owner=instance,
        skip_self=True,
    )
    return udf(*args)


def prompt(
    expr: Expr | str,
    *,
    provider: str = "openai",
    model: str | None = None,
    system: str | None = None,
    return_format: Any = None,
    template: str | None = None,
    images: Expr | str | Sequence[Expr | str] | None = None,
    files: Expr | str | Sequence[Expr | str] | None = None,
    **options: Any,
) -> Expr:
    """An LLM's answer to each row's text (null for a null row).

    ``images`` (a column, or a list of them) adds each row's images to its message as OpenAI's
    ``image_url`` parts: ``http(s)://`` URLs as they are; bytes, paths, file references and
    decoded images as ``data:`` URIs (read and encoded in the worker). A null image is left out.
    ``files`` (paths, URLs or file references: PDFs, text files) adds OpenAI ``file`` parts,
    each file's bytes as a ``data:`` URI of its media type.

    ``mode="batch"`` sends the requests through the provider's Batch API instead of one by one
    (OpenAI's: answered within 24 hours, at half the price; budgets and ``prices`` count its
    tokens at half). Each call of ``batch_size`` rows (10,000 by default in this mode) is one
    provider batch, polled every ``batch_poll_interval`` seconds (30); batch ids are journaled
    so that a rerun after a crash polls them rather than sending their requests again, and what
    a batch did not answer is asked live (``batch_fallback="live"``) or fails its row for
    ``on_error`` (``batch_fallback="error"``). See ``providers/openai_batch.py``.

    ``return_format`` (a pydantic model class or a JSON schema) asks for structured output and
    makes the column a STRUCT of its fields. ``template`` (``"Summarize: {text}"``) fills its
    placeholders from columns of those names instead of using ``expr``. Generation options
    (``temperature``, ``max_tokens``, ...) and provider options (``base_url``,
    ``max_concurrent_requests``, ``requests_per_minute``, ``cache``, ...) pass through.
    """
    execution, provider_options = _split(options)
    if provider_options.get("mode", "live") == "batch":
        if not registry.PROVIDERS.get(provider, ("",))[0].endswith(".openai"):
            raise ConfigurationError(
                f"prompt(): mode='batch' sends requests through OpenAI's Batch API, which "
                f"provider {provider!r} does not speak; use provider='openai' (any server "
                "with /v1/batches), or leave mode out"
            )
        execution.setdefault("batch_size", BATCH_MODE_BATCH_SIZE)
        execution["driver_node"] = (
            "mode='batch' journals its batch ids on the driver's disk, so that a rerun never "
            "submits a request twice"
        )
    parsed: Template | None = None
    if template is not None:
        if not isinstance(template, str):
            raise ConfigurationError(f"prompt(): template must be a string, got {template!r}")
        parsed = Template.parse(template)
        args = [col(name) for name in parsed.fields]
    else:
        args = [_column(expr, "prompt")]
    image_args = _attachments(images)
    file_args = _attachments(files)
    args.extend(image_args + file_args)
    out: OutputFormat | None = None if return_format is None else output_format(return_format)
    if execution.get("gpus_per_actor"):
        provider_options.setdefault("tensor_parallel_size", execution["gpus_per_actor"])
    descriptor = registry.descriptor("prompt", provider, model, provider_options)
    if out is not None and not getattr(descriptor, "structured_output", True):
        raise ConfigurationError(
            f"prompt(): provider {provider!r} cannot hold a model to a JSON schema; for "
            "return_format use an OpenAI-compatible server (vLLM serve, SGLang, ...) or 'vllm'"
        )
    return_type = pa.string() if out is None else out.arrow_type
    runner_options: dict[str, Any] = {"system": system, "template": parsed, "output": out}
    runner_options.update(images=len(image_args), files=len(file_args))
    return _call(
        "prompt",
        PromptRunner,
        descriptor,
        args,
        return_type=return_type,
        execution=execution,
        runner_options=runner_options,
    )


def embed_text(
    expr: Expr | str,
    *,
    provider: str | None = None,
    model: str | None = None,
    dimensions: int | None = None,
    normalize: bool = False,
    **options: Any,
) -> Expr:
    """An embedding of each row's text: ``FLOAT[n]`` when the model's size is known when the
    plan is built, else ``FLOAT[]``. The provider is ``sentence_transformers`` unless said, or
    the OpenAI-compatible one with ``server=`` (a ``vane.ai.serve`` handle)."""
    provider = provider or _default_provider(options, "sentence_transformers")
    execution, provider_options = _split(options)
    if dimensions is not None:
        provider_options["dimensions"] = dimensions
    descriptor = registry.descriptor("embed_text", provider, model, provider_options)
    size = getattr(descriptor, "size", None) or dimensions
    return_type = pa.list_(pa.float32(), size) if size else pa.list_(pa.float32())
    runner = RemoteEmbedTextRunner if _remote(provider) else EmbedTextRunner
    args = [_column(expr, "embed_text")]
    return _call(
        "embed_text",
        runner,
        descriptor,
        args,
        return_type=return_type,
        execution=execution,
        runner_options={"normalize": normalize},
    )


def embed_image(
    expr: Expr | str,
    *,
    provider: str = "transformers",
    model: str | None = None,
    normalize: bool = False,
    **options: Any,
) -> Expr:
    """An embedding of each row's image, given as bytes, a path or URL, a file reference or
    decoded pixels: a CLIP-style model through transformers, or with ``provider="openai"`` an
    OpenAI-compatible server's ``/embeddings`` as vLLM's takes images (each image a request
    holding one chat-style message with an ``image_url`` part; ``instruction=`` adds a text
    part, ``dimensions=`` asks for a size)."""
    execution, provider_options = _split(options)
    descriptor = registry.descriptor("embed_image", provider, model, provider_options)
    size = getattr(descriptor, "size", None) or provider_options.get("dimensions")
    return_type = pa.list_(pa.float32(), size) if size else pa.list_(pa.float32())
    args = [_column(expr, "embed_image")]
    return _call(
        "embed_image",
        RemoteEmbedImageRunner if _remote(provider) else EmbedImageRunner,
        descriptor,
        args,
        return_type=return_type,
        execution=execution,
        runner_options={"normalize": normalize},
    )


def classify_text(
    expr: Expr | str,
    labels: Sequence[str],
    *,
    provider: str | None = None,
    model: str | None = None,
    method: str | None = None,
    **options: Any,
) -> Expr:
    """The label that fits each row's text best. ``method="embedding"`` (the default for
    ``sentence_transformers`` and ``transformers``) picks the label whose embedding is most like
    the text's, zero-shot; ``method="prompt"`` (the default for servers and vLLM) asks an LLM to
    choose, with the labels as a structured-output enum."""
    if isinstance(labels, str) or not labels or not all(isinstance(x, str) for x in labels):
        raise ConfigurationError(f"classify_text() takes a list of label strings, got {labels!r}")
    labels = list(dict.fromkeys(labels))
    provider = provider or _default_provider(options, "sentence_transformers")
    local = provider in ("sentence_transformers", "transformers")
    method = method or ("embedding" if local else "prompt")
    if method == "prompt":
        return _chosen("text", expr, labels, provider=provider, model=model, options=options)
    if method != "embedding":
        raise ConfigurationError(
            f"classify_text(): method={method!r} is not 'embedding' or 'prompt'"
        )
    execution, provider_options = _split(options)
    descriptor = registry.descriptor("embed_text", provider, model, provider_options)
    args = [_column(expr, "classify_text")]
    return _call(
        "classify_text",
        ClassifyByEmbeddingRunner,
        descriptor,
        args,
        return_type=pa.string(),
        execution=execution,
        runner_options={"labels": labels},
    )


def _chosen(
    what: str,
    expr: Expr | str,
    labels: list[str],
    *,
    provider: str,
    model: str | None,
    options: Mapping[str, Any],
) -> Expr:
    """A chat model's pick of one of ``labels`` for each row's ``what`` ("text", or "image":
    ``expr`` is then the images, sent as parts of one question), held to them by a JSON schema
    whose ``label`` is an enum of them; an answer that is not one of them fails its row
    (``on_error`` decides what that does), naming the answer and the labels."""
    choice = {
        "title": "label",
        "type": "object",
        "properties": {"label": {"type": "string", "enum": labels}},
    }
    system = (
        f"Classify the {what} into exactly one of these labels: {', '.join(labels)}. "
        "Answer with the label only."
    )
    question = Literal("Which of the labels fits this image?") if what == "image" else expr
    answer = prompt(
        question,
        provider=provider,
        model=model,
        system=system,
        return_format=choice,
        images=expr if what == "image" else None,
        **options,
    )
    return FunctionCall("struct_extract", (answer, Literal("label")))


def classify_image(
    expr: Expr | str,
    labels: Sequence[str],
    *,
    provider: str = "transformers",
    model: str | None = None,
    template: str = "a photo of a {}",
    **options: Any,
) -> Expr:
    """The label that fits each row's image best. With a CLIP-style model (transformers),
    zero-shot as CLIP does: the label whose text (``template`` filled with it) embeds closest
    to the image. With ``provider="openai"`` (an OpenAI-compatible server with a vision chat
    model), the model is asked to pick one, held to the labels by a JSON schema as
    ``classify_text`` does; an answer that is not a label fails its row. Images as bytes,
    paths, URLs, file references or decoded pixels."""
    if isinstance(labels, str) or not labels or not all(isinstance(x, str) for x in labels):
        raise ConfigurationError(f"classify_image() takes a list of label strings, got {labels!r}")
    if not isinstance(template, str) or "{}" not in template:
        raise ConfigurationError(
            f"classify_image(): template holds one {{}} for the label, got {template!r}"
        )
    if _remote(provider):
        labels = list(dict.fromkeys(labels))
        return _chosen("image", expr, labels, provider=provider, model=model, options=options)
    execution, provider_options = _split(options)
    descriptor = registry.descriptor("embed_image", provider, model, provider_options)
    return _call(
        "classify_image",
        ClassifyImageRunner,
        descriptor,
        [_column(expr, "classify_image")],
        return_type=pa.string(),
        execution=execution,
        runner_options={"labels": list(dict.fromkeys(labels)), "template": template},
    )
