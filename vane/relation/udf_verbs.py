"""The verbs that run models: the UDF steps (``map_batches``, ``map``, ``flat_map``) and the AI
functions, each a column the relation gains, with the estimate of what they will send."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane._arguments import checked
from vane.config import get_config
from vane.errors import ConfigurationError
from vane.execution.runner import current_runner
from vane.ir.expr import Expr
from vane.plan import nodes
from vane.relation.verbs import RelationalVerbs
from vane.types import SchemaSpec, to_arrow_schema
from vane.udf.build import build_spec
from vane.udf.spec import DEFAULT_ACTOR_START_TIMEOUT_S, Kind

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

    from vane.estimate import Estimate


class UdfVerbs(RelationalVerbs):
    """The UDF steps and the AI functions."""

    __slots__ = ()

    @checked
    def map_batches(
        self,
        fn: Any,
        *,
        schema: SchemaSpec | None = None,
        batch_size: int | None = None,
        batch_bytes: int | None = None,
        batch_format: str = "pyarrow",
        execution_backend: str | None = None,
        concurrency: int | tuple[int, int] = 1,
        gpus: float = 0,
        cpus: float | None = None,
        memory: int | None = None,
        fn_constructor_args: tuple[Any, ...] = (),
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        fn_args: tuple[Any, ...] = (),
        fn_kwargs: Mapping[str, Any] | None = None,
        max_concurrency_per_actor: int | None = None,
        max_retries: int = 0,
        on_error: str = "raise",
        error_column: str | None = None,
        preserve_order: bool = True,
        batch_timeout_s: float | None = None,
        actor_start_timeout_s: float | None = DEFAULT_ACTOR_START_TIMEOUT_S,
    ) -> Self:
        """Run a callable class (constructed once per actor, inside the worker) or a function
        over batches of ``batch_size`` rows, each a ``pa.Table`` (``batch_format="pandas"``: a
        DataFrame; ``"numpy"``: a dict of arrays; a column of images of one shape is one
        ``(n, h, w, c)`` array). ``batch_bytes`` caps a batch's input bytes as well as its rows
        (a batch of 4K images holds few of them; a larger row is a batch of its own; on Ray, the
        actor cuts each batch of ``batch_size`` rows so). ``functools.partial`` binds arguments;
        ``fn_args``/``fn_kwargs`` are passed after the batch.

        It returns (or, as a generator, yields) a ``pa.Table``, ``RecordBatch``, dict of
        columns or pandas DataFrame with exactly the columns of ``schema`` (``{"name": "DuckDB
        type"}`` or a ``pa.Schema``; without one, the schema of its first output batch, learned
        when the plan first needs it); the row count may change. See docs/map_batches.md for
        backends, concurrency, GPUs, retries, ``on_error`` (with ``"null"``, each failing row's
        error text is kept in ``error_column``, "error" by default) and the timeouts
        (``batch_timeout_s`` per attempt at a batch, ``actor_start_timeout_s`` for the
        constructor).

        >>> import vane, pyarrow as pa, pyarrow.compute as pc
        >>> class Double:
        ...     def __call__(self, batch: pa.Table) -> pa.Table:
        ...         return pa.table({"id": batch["id"], "twice": pc.multiply(batch["id"], 2)})
        >>> out = vane.range(3).map_batches(Double, schema={"id": "BIGINT", "twice": "BIGINT"})
        >>> out.to_pylist()
        [{'id': 0, 'twice': 0}, {'id': 1, 'twice': 2}, {'id': 2, 'twice': 4}]
        """
        return self._udf("map_batches", "batch", locals())

    @checked
    def map(
        self,
        fn: Any,
        *,
        schema: SchemaSpec | None = None,
        batch_size: int | None = None,
        execution_backend: str | None = None,
        concurrency: int | tuple[int, int] = 1,
        gpus: float = 0,
        cpus: float | None = None,
        memory: int | None = None,
        fn_constructor_args: tuple[Any, ...] = (),
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        fn_args: tuple[Any, ...] = (),
        fn_kwargs: Mapping[str, Any] | None = None,
        max_concurrency_per_actor: int | None = None,
        max_retries: int = 0,
        on_error: str = "raise",
        error_column: str | None = None,
        preserve_order: bool = True,
        batch_timeout_s: float | None = None,
        actor_start_timeout_s: float | None = DEFAULT_ACTOR_START_TIMEOUT_S,
    ) -> Self:
        """Like ``map_batches``, one row at a time: ``fn`` takes a row dict and returns a row
        dict. An ``async`` function runs up to ``max_concurrency_per_actor`` rows at once."""
        return self._udf("map", "row", locals())

    @checked
    def flat_map(
        self,
        fn: Any,
        *,
        schema: SchemaSpec | None = None,
        batch_size: int | None = None,
        execution_backend: str | None = None,
        concurrency: int | tuple[int, int] = 1,
        gpus: float = 0,
        cpus: float | None = None,
        memory: int | None = None,
        fn_constructor_args: tuple[Any, ...] = (),
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        fn_args: tuple[Any, ...] = (),
        fn_kwargs: Mapping[str, Any] | None = None,
        max_concurrency_per_actor: int | None = None,
        max_retries: int = 0,
        on_error: str = "raise",
        error_column: str | None = None,
        preserve_order: bool = True,
        batch_timeout_s: float | None = None,
        actor_start_timeout_s: float | None = DEFAULT_ACTOR_START_TIMEOUT_S,
    ) -> Self:
        """Like ``map``, but ``fn`` returns a list of row dicts (none, one or many per row), or
        yields them as a generator."""
        return self._udf("flat_map", "flat", locals())

    def _udf(self, verb: str, kind: Kind, arguments: dict[str, Any]) -> Self:
        """The step for a UDF verb, from that verb's own arguments (its ``locals()``): the three
        verbs spell out every option for users and their editors, and forward them here as one."""
        options = {k: v for k, v in arguments.items() if k not in ("self", "fn", "schema")}
        spec = build_spec(verb, arguments["fn"], kind=kind, **options)
        schema = arguments["schema"]
        if spec.backend == "ray_actor" and get_config().runner != "ray":
            raise ConfigurationError(
                f"{verb}(): execution_backend='ray_actor' runs on a Ray cluster, and the runner "
                "is 'local'. Call vane.configure(runner='ray') before building the plan, or use "
                "execution_backend='subprocess_actor' (or 'thread') to run on this machine"
            )
        declared: pa.Schema | nodes.InferredSchema
        if schema is None:
            from vane.execution.inference import infer_output_schema

            plan = self._plan
            declared = nodes.InferredSchema(lambda: infer_output_schema(plan, spec))
        else:
            declared = to_arrow_schema(schema)
        step = nodes.UdfStep(self._plan, spec, declared)
        current_runner().check(step)  # before anything runs: fail with the counts
        return self._derive(step)

    # ---- AI functions: each adds one column and keeps the rest ---------------------------

    def prompt(
        self,
        column: str | Expr | None = None,
        *,
        template: str | None = None,
        output_column: str = "response",
        provider: str = "openai",
        model: str | None = None,
        system: str | None = None,
        return_format: Any = None,
        **options: Any,
    ) -> Self:
        """Ask an LLM about each row: ``column`` is the prompt, or ``template`` fills
        ``{placeholders}`` from columns; the answer is added as ``output_column``. Takes
        ``batch_size``, ``concurrency``, ``execution_backend``, ``gpus_per_actor``,
        ``on_error``, and the provider's options (see docs/ai-functions.md); ``mode="batch"``
        sends the requests through OpenAI's Batch API at half the price (docs/resume.md)."""
        from vane.ai import prompt

        if column is None and template is None:
            raise ConfigurationError("prompt() needs the prompt column, or template=")
        call = prompt(
            column if column is not None else "",
            provider=provider,
            model=model,
            system=system,
            return_format=return_format,
            template=template,
            **options,
        )
        return self.with_column(output_column, call)

    def embed_text(
        self,
        column: str | Expr,
        *,
        output_column: str = "embedding",
        provider: str | None = None,
        model: str | None = None,
        **options: Any,
    ) -> Self:
        """Add an embedding of each row's text as ``output_column`` (``sentence_transformers``
        unless ``provider`` says, or ``server=`` names a server that ``vane.ai.serve``
        started)."""
        from vane.ai import embed_text

        call = embed_text(column, provider=provider, model=model, **options)
        return self.with_column(output_column, call)

    def embed_image(
        self,
        column: str | Expr,
        *,
        output_column: str = "embedding",
        provider: str = "transformers",
        model: str | None = None,
        **options: Any,
    ) -> Self:
        """Add an embedding of each row's image (bytes, a path or URL, a file reference, pixels)
        as ``output_column``: a CLIP-style model, or an OpenAI-compatible server's
        ``/embeddings`` with ``provider="openai"`` (``vane.ai.embed_image``)."""
        from vane.ai import embed_image

        call = embed_image(column, provider=provider, model=model, **options)
        return self.with_column(output_column, call)

    def classify_text(
        self,
        column: str | Expr,
        labels: Sequence[str],
        *,
        output_column: str = "label",
        provider: str | None = None,
        model: str | None = None,
        **options: Any,
    ) -> Self:
        """Add the label among ``labels`` that fits each row's text best as ``output_column``."""
        from vane.ai import classify_text

        call = classify_text(column, labels, provider=provider, model=model, **options)
        return self.with_column(output_column, call)

    def classify_image(
        self,
        column: str | Expr,
        labels: Sequence[str],
        *,
        output_column: str = "label",
        provider: str = "transformers",
        model: str | None = None,
        **options: Any,
    ) -> Self:
        """Add the label among ``labels`` that fits each row's image best as ``output_column``:
        zero-shot, CLIP-style, or chosen by a vision chat model with ``provider="openai"``
        (``vane.ai.classify_image``)."""
        from vane.ai import classify_image

        call = classify_image(column, labels, provider=provider, model=model, **options)
        return self.with_column(output_column, call)

    def estimate(self, prices: Mapping[str, float] | None = None) -> Estimate:
        """What the pipeline's AI functions will send, before anything is sent: requests,
        input tokens (the model's tokenizer where it is on this machine, else about four
        characters a token), output tokens at most (``max_tokens``), and the cost where
        ``prices`` are given in dollars per million tokens (``{"input": 0.15, "output":
        0.60}``). It reads and renders the steps' input; no model is called (docs/resume.md).
        """
        from vane.estimate import estimate

        return estimate(self._plan, prices)
