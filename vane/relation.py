"""``Relation``: the lazy, immutable user API over a logical plan.

Every verb builds a new plan node (which validates itself and derives its schema) and returns a
new ``Relation``; nothing runs until an action (``to_arrow``, ``count``, ``show``, ``write_*``,
iteration) hands the plan to the runner.
"""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from vane._arguments import checked
from vane.config import get_config
from vane.errors import ConfigurationError, PlanError
from vane.execution.runner import current_runner
from vane.io.commit import WriteMode
from vane.io.resume import Resume
from vane.io.sinks import FileSink, WriteResult
from vane.ir.expr import Alias, Column, Expr, UdfErrorText, as_expr, col, udf_error_columns
from vane.ir.parse import parse_sort_key
from vane.plan import nodes
from vane.plan.explain import explain as explain_plan
from vane.plan.nodes import UdfStep
from vane.plan.traverse import walk
from vane.types import SchemaSpec, describe_schema, to_arrow_schema
from vane.udf.build import build_spec
from vane.udf.spec import DEFAULT_ACTOR_START_TIMEOUT_S, Kind

if TYPE_CHECKING:
    import pandas as pd

    from vane.estimate import Estimate
    from vane.io.files import FileFormat
    from vane.plan.nodes import JoinHow


def _as_tuple(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PlanError(f"{what} must be a string or a list of strings, got {value!r}")


def _resume(resume: object, caller: str) -> Resume | None:
    if resume not in (False, True, "restart"):
        raise ConfigurationError(
            f"{caller}(): resume must be True, False or 'restart', got {resume!r}"
        )
    return resume or None


def _keys(
    value: str | Expr | Sequence[str | Expr] | None, what: str, columns: Sequence[str]
) -> tuple[Expr, ...]:
    """A join's key expressions on one side: a name of that side's columns is that column."""
    if value is None:
        return ()
    values = [value] if isinstance(value, (str, Expr)) else value
    if not isinstance(values, Sequence) or not all(isinstance(v, (str, Expr)) for v in values):
        raise PlanError(
            f"join(): {what} must be a column name, a SQL string, a vane expression or a list "
            f"of those, got {value!r}"
        )
    return tuple(as_expr(v, columns, "join") for v in values)


def _error_columns(exprs: Sequence[Expr], taken: Sequence[str], where: str) -> list[str]:
    """The columns UDF calls in ``exprs`` keep their errors in, each a new column of its own."""
    names = udf_error_columns(exprs)
    seen = {n.lower() for n in taken}
    for name in names:
        if name.lower() in seen:
            raise PlanError(
                f"{where}(): a UDF keeps its errors in error_column={name!r}, and the step "
                f"already has a column {name!r}; give the error column a name of its own"
            )
        seen.add(name.lower())
    return names


def _check_references(exprs: Sequence[Expr], columns: Sequence[str], where: str) -> None:
    """A ``vane.col`` that names no input column fails here, with the closest names (DuckDB's
    own message for a quoted name it cannot bind talks of aliases instead)."""
    known = {c.lower() for c in columns}
    for expr in exprs:
        for node in expr.walk():
            if isinstance(node, Column) and node.name.lower() not in known:
                close = difflib.get_close_matches(node.name, list(columns), n=3, cutoff=0.6)
                guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
                raise PlanError(
                    f"{where}(): there is no column {node.name!r}{guess}. Input columns: "
                    f"{', '.join(columns)}"
                )


def _no_error_columns(exprs: Sequence[Expr], where: str) -> None:
    names = udf_error_columns(exprs)
    if names:
        raise PlanError(
            f"{where}(): a UDF with error_column={names[0]!r} adds a column, which {where} "
            "cannot; compute the UDF's column with with_column() first, then use it here"
        )


def _with_servers(text: str) -> str:
    """The plan's text, then the servers (``vane.ai.serve``) its steps send requests to: the
    steps name theirs (``via <server>``), and each server's nodes, GPUs, ports and command
    follow. No server can run before ``vane.ai.servers`` is imported: then there is nothing to
    add, and nothing is imported for it."""
    servers = sys.modules.get("vane.ai.servers")
    return text if servers is None else text + servers.describe_used(text)


class Relation:
    """A lazy table: a logical plan that runs only when an action asks for its rows.

    >>> import vane
    >>> rel = vane.from_pydict({"id": [1, 2, 3], "x": [10.0, 20.0, 30.0]})
    >>> rel.filter("x > 15").select("id", "x * 2 AS y").to_pylist()
    [{'id': 2, 'y': 40.0}, {'id': 3, 'y': 60.0}]
    """

    __slots__ = ("_plan",)

    def __init__(self, plan: nodes.PlanNode) -> None:
        if not isinstance(plan, nodes.PlanNode):
            raise TypeError("Relation wraps a plan node; build one with vane.read_parquet, ...")
        self._plan = plan

    # ---- properties: known without running the data path ---------------------------------

    @property
    def plan(self) -> nodes.PlanNode:
        """The logical plan this relation runs."""
        return self._plan

    @property
    def schema(self) -> pa.Schema:
        """The output schema, derived from the plan without reading data."""
        return self._plan.schema

    @property
    def columns(self) -> list[str]:
        return list(self._plan.schema.names)

    @checked
    def explain(self, optimized: bool = False, analyze: bool = False) -> str:
        """The logical plan as text, one line per step, the final step first; with
        ``optimized=True``, the plan as it will run, after the optimizer's rewrites. With
        ``analyze=True`` the plan runs (its rows are read and dropped) and each UDF step's line
        ends with what it did: rows in and out, rows on_error handled, seconds, and what it
        counted (an AI function's requests, tokens, retries, cache hits and failures)."""
        from vane.plan.optimizer import optimize

        if analyze:
            return self._analyzed()
        plan = optimize(self._plan) if optimized else self._plan
        return _with_servers(explain_plan(plan, current_runner().placement(plan)))

    def _analyzed(self) -> str:
        from vane.observe.events import StageFinished, subscribe
        from vane.plan.optimizer import optimize

        plan = optimize(self._plan)
        seen: list[object] = []
        unsubscribe = subscribe(seen.append)
        started = time.perf_counter()
        rows = 0
        try:
            # The plan as optimized above runs (optimizing it again changes nothing), so its
            # steps' ids are the ones the summaries carry.
            for batch in current_runner().stream(plan, get_config().batch_size):
                rows += batch.num_rows
        finally:
            unsubscribe()
        seconds = time.perf_counter() - started
        summaries = {e.step_id: e for e in seen if isinstance(e, StageFinished)}
        notes = {
            id(node): summaries[node.step_id].summary()
            for node in walk(plan)
            if isinstance(node, UdfStep) and node.step_id in summaries
        }
        text = _with_servers(explain_plan(plan, current_runner().placement(plan), notes))
        return f"{text}\n-- ran in {seconds:.2f} s, {rows:,} row{'s' * (rows != 1)}"

    def __repr__(self) -> str:
        plan = self._plan
        declared = plan.declared if isinstance(plan, UdfStep) else None
        if isinstance(declared, nodes.InferredSchema) and not declared.known:
            # showing it must not run it
            return f"Relation[columns not known until its first batch runs]\n{self.explain()}"
        return f"Relation[{describe_schema(self.schema)}]\n{self.explain()}"

    # ---- verbs: each returns a new Relation ------------------------------------------------

    def __getitem__(self, name: str) -> Expr:
        """The column ``name`` as an expression: ``rel["review"]`` (checked now)."""
        if not isinstance(name, str) or name not in self.columns:
            raise PlanError(f"no column named {name!r}; the relation has {', '.join(self.columns)}")
        return col(name)

    def _exprs(self, values: Sequence[Any], where: str) -> tuple[Expr, ...]:
        exprs = tuple(as_expr(v, self.columns, where) for v in values)
        _check_references(exprs, self.columns, where)
        return exprs

    def select(self, *exprs: str | Expr) -> Relation:
        """Keep or compute columns: names, SQL text or expressions, side by side:
        ``rel.select("id", "price * qty AS total", (vane.col("x") + 1).alias("y"))``.
        A string that is exactly a column's name is that column, whatever characters it has."""
        values = self._exprs(exprs, "select")
        errors = _error_columns(values, [e.output_name for e in values], "select")
        values += tuple(Alias(UdfErrorText(name), name) for name in errors)
        return Relation(nodes.Select(self._plan, values))

    def filter(self, predicate: str | Expr) -> Relation:
        """Keep the rows where a predicate holds: ``rel.filter("score > 0.5")`` or
        ``rel.filter(vane.col("score") > 0.5)``."""
        (expr,) = self._exprs([predicate], "filter")
        _no_error_columns([expr], "filter")
        return Relation(nodes.Filter(self._plan, expr))

    def with_column(self, name: str, expr: str | Expr) -> Relation:
        """Add a column computed by an expression (SQL text or a vane expression, a column UDF
        call included), or replace the column of that name in place."""
        return self.with_columns({name: expr})

    def with_columns(self, columns: Mapping[str, str | Expr]) -> Relation:
        """Add or replace several columns at once; each is computed from the input as it was."""
        if not isinstance(columns, Mapping) or not columns:
            raise PlanError("with_columns() takes a non-empty dict of {name: expression}")
        items = tuple(
            (name, as_expr(e, self.columns, f"with_column({name!r})"))
            for name, e in columns.items()
        )
        _check_references([e for _, e in items], self.columns, "with_column")
        taken = [*self.columns, *(name for name, _ in items)]
        errors = _error_columns([e for _, e in items], taken, "with_column")
        items += tuple((name, UdfErrorText(name)) for name in errors)
        return Relation(nodes.WithColumns(self._plan, items))

    def drop(self, *names: str) -> Relation:
        return Relation(nodes.Drop(self._plan, tuple(names)))

    def rename(self, mapping: Mapping[str, str]) -> Relation:
        """Rename columns: ``rel.rename({"old": "new"})``."""
        if not isinstance(mapping, Mapping):
            raise PlanError("rename() takes a dict such as {'old': 'new'}")
        return Relation(nodes.Rename(self._plan, tuple(mapping.items())))

    @checked
    def limit(self, n: int, offset: int = 0) -> Relation:
        return Relation(nodes.Limit(self._plan, n, offset))

    @checked
    def order_by(self, *keys: str | Expr, descending: bool | Sequence[bool] = False) -> Relation:
        """Sort by keys: column names, SQL (``"score DESC"``, ``"ts NULLS FIRST"``) or
        expressions; ``descending`` applies to every key, or gives one flag per key."""
        flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(keys):
            raise PlanError(
                f"order_by(): {len(keys)} key(s) and {len(flags)} descending flag(s); give one "
                "flag per key, or a single bool for all"
            )
        sort_keys = []
        for key, flag in zip(keys, flags, strict=True):
            if isinstance(key, str) and key not in self.columns:
                parsed = parse_sort_key(key)
                expr = as_expr(parsed.text, self.columns, "order_by")
                sort_keys.append(
                    nodes.SortKey(expr, parsed.descending != bool(flag), parsed.nulls_first)
                )
            else:
                (expr,) = self._exprs([key], "order_by")
                sort_keys.append(nodes.SortKey(expr, bool(flag)))
        _no_error_columns([k.expr for k in sort_keys], "order_by")
        return Relation(nodes.OrderBy(self._plan, tuple(sort_keys)))

    @checked
    def join(
        self,
        other: Relation,
        on: str | Sequence[str] | None = None,
        how: JoinHow = "inner",
        *,
        left_on: str | Expr | Sequence[str | Expr] | None = None,
        right_on: str | Expr | Sequence[str | Expr] | None = None,
    ) -> Relation:
        """Join with another relation.

        ``on`` names key columns that both sides have (each appears once in the output);
        ``left_on``/``right_on`` pair key expressions instead, each evaluated on its own side: a
        column name or ``vane.col`` is that side's column (``left_on="id", right_on="id"`` works
        when both sides have ``id``), other SQL text may name the sides as the tables ``l`` and
        ``r``. Other columns that both sides have keep the left's name and get ``_right`` on the
        right's copy.
        ``how`` is one of inner, left, right, outer, semi, anti.
        """
        if not isinstance(other, Relation):
            raise PlanError(f"join() needs a vane Relation, got {type(other).__name__}")
        return Relation(
            nodes.Join(
                self._plan,
                other._plan,
                how,
                _as_tuple(on, "on"),
                _keys(left_on, "left_on", self.columns),
                _keys(right_on, "right_on", other.columns),
            )
        )

    @checked
    def aggregate(
        self,
        *aggs: str | Expr,
        group_by: str | Expr | Sequence[str | Expr] | None = None,
    ) -> Relation:
        """Aggregate, optionally per group; the group keys come first in the output.

        ``rel.aggregate("count(*) AS n", vane.col("score").mean().alias("mean"), group_by="label")``

        A group key is a column name, an expression, or SQL with an optional alias
        (``"hour(created_at) AS hr"``); an expression key without one is named by its text.
        """
        if group_by is None:
            keys: Sequence[Any] = ()
        elif isinstance(group_by, (str, Expr)):
            keys = [group_by]
        else:
            keys = list(group_by)
        return Relation(
            nodes.Aggregate(
                self._plan, self._exprs(aggs, "aggregate"), self._exprs(keys, "group_by")
            )
        )

    def distinct(self) -> Relation:
        return Relation(nodes.Distinct(self._plan))

    def union(self, other: Relation) -> Relation:
        """All rows of both relations; columns are matched by name, never by position."""
        if not isinstance(other, Relation):
            raise PlanError(f"union() needs a vane Relation, got {type(other).__name__}")
        return Relation(nodes.Union(self._plan, other._plan))

    def sql(self, query: str, name: str = "rel") -> Relation:
        """Run DuckDB SQL in which this relation is the table ``name``.

        ``rel.sql("SELECT label, count(*) AS n FROM rel GROUP BY label")``
        """
        from vane.plan.sql_calls import sql_query
        from vane.udf.attached import attached

        return Relation(sql_query(query, ((name, self._plan),), attached()))

    # ---- UDF steps -----------------------------------------------------------------------

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
    ) -> Relation:
        """Run a callable class (constructed once per actor, inside the worker) or a function
        over batches of ``batch_size`` rows, each a ``pa.Table`` (``batch_format="pandas"``: a
        DataFrame; ``"numpy"``: a dict of arrays; a column of images of one shape is one
        ``(n, h, w, c)`` array). ``batch_bytes`` caps a batch's input bytes as well as its rows
        (a batch of 4K images holds few of them; a larger row is a batch of its own; the local
        runner). ``functools.partial`` binds arguments;
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
    ) -> Relation:
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
    ) -> Relation:
        """Like ``map``, but ``fn`` returns a list of row dicts (none, one or many per row), or
        yields them as a generator."""
        return self._udf("flat_map", "flat", locals())

    def _udf(self, verb: str, kind: Kind, arguments: dict[str, Any]) -> Relation:
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
        return Relation(step)

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
    ) -> Relation:
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
    ) -> Relation:
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
    ) -> Relation:
        """Add an embedding of each row's image (bytes or a file path) as ``output_column``."""
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
    ) -> Relation:
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
    ) -> Relation:
        """Add the label among ``labels`` that fits each row's image best (zero-shot, CLIP-style)
        as ``output_column``."""
        from vane.ai import classify_image

        call = classify_image(column, labels, provider=provider, model=model, **options)
        return self.with_column(output_column, call)

    # ---- actions: these run the plan ---------------------------------------------------------

    def estimate(self, prices: Mapping[str, float] | None = None) -> Estimate:
        """What the pipeline's AI functions will send, before anything is sent: requests,
        input tokens (the model's tokenizer where it is on this machine, else about four
        characters a token), output tokens at most (``max_tokens``), and the cost where
        ``prices`` are given in dollars per million tokens (``{"input": 0.15, "output":
        0.60}``). It reads and renders the steps' input; no model is called (docs/resume.md).
        """
        from vane.estimate import estimate

        return estimate(self._plan, prices)

    def materialize(self) -> Relation:
        """Run the plan now and keep its result, so later actions reuse it instead of running
        the plan (and its models) again. The result stays in memory up to
        ``vane.configure(memory_budget=...)`` and spills to temporary Parquet files beyond it;
        they are deleted when the returned relation is no longer used.

        >>> import vane
        >>> kept = vane.range(3).with_column("sq", "id * id").materialize()
        >>> kept.count(), kept.to_pylist()[2]
        (3, {'id': 2, 'sq': 4})
        """
        return Relation(current_runner().materialize(self._plan))

    def count(self) -> int:
        return current_runner().count(self._plan)

    def to_arrow(self) -> pa.Table:
        return current_runner().to_arrow(self._plan)

    def to_pandas(self) -> pd.DataFrame:
        from vane._deps import require

        require("pandas", extra="pandas")
        return self.to_arrow().to_pandas()

    def to_pylist(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.to_arrow().to_pylist()
        return rows

    @checked
    def iter_batches(self, batch_size: int | None = None) -> Iterator[pa.RecordBatch]:
        """Stream the rows as record batches. With ``batch_size``, each holds exactly that many
        rows (the last may hold fewer); without it, each is handed on as it is produced, of the
        size it comes in: a UDF step's answers as each batch of them is done (several already
        done together, up to ``vane.configure(batch_size=...)`` rows), so a model's first rows
        arrive after its first batch, not once a batch of the configured size has filled.

        >>> import vane
        >>> rel = vane.range(5).with_column("sq", "id * id")
        >>> [b.num_rows for b in rel.iter_batches(batch_size=2)]
        [2, 2, 1]
        >>> sum(b.num_rows for b in rel.iter_batches())
        5
        """
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0
        ):
            raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}")
        return current_runner().stream(self._plan, batch_size)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Rows as dicts, streamed as they are produced (as ``iter_batches()``)."""
        for batch in self.iter_batches():
            yield from batch.to_pylist()

    @checked
    def show(self, n: int = 10, *, width: int | None = None) -> None:
        """Print the first ``n`` rows as a table at most ``width`` characters wide (by default
        the terminal's, else $COLUMNS, else 120). Values that do not fit are cut, with their
        length (a vector's items, a text's characters); columns that do not fit even cut are
        left out in the middle."""
        from vane._display import render, terminal_width

        width = terminal_width(width)  # checked before anything runs
        table = self.limit(n).to_arrow()
        shown = table.num_rows
        footer = f"first {shown} rows" if shown == n else f"{shown} row{'s' * (shown != 1)}"
        print(render(table, width=width, footer=footer))

    def _write(  # noqa: PLR0917 - private; the write_* methods name every argument
        self,
        fmt: FileFormat,
        path: str,
        mode: WriteMode,
        partition_by: str | Sequence[str] | None,
        rows_per_file: int | None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        resume: Resume = False,
    ) -> WriteResult:
        sink = FileSink(
            fmt,
            str(path),
            mode,
            _as_tuple(partition_by, "partition_by"),
            rows_per_file,
            _storage(path, storage_options, f"write_{fmt}"),
        )
        return current_runner().write(self._plan, sink, resume=_resume(resume, f"write_{fmt}"))

    @checked
    def write_lance(
        self,
        uri: str,
        *,
        mode: Literal["create", "append", "overwrite"] = "create",
        max_rows_per_file: int | None = None,
        data_storage_version: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        vector_index: Mapping[str, Any] | None = None,
        resume: Resume = False,
    ) -> WriteResult:
        """Stream the rows into a Lance dataset, committed as one new version: on failure the
        dataset stays at its previous version.

        ``mode``: ``"create"`` (the default; an existing dataset is an error), ``"append"``
        (adds a version; creates the dataset if there is none) or ``"overwrite"`` (a version
        holding only these rows). ``vector_index={"column": "embedding", "metric": "cosine",
        ...}`` builds Lance's vector index on a fixed-size float column after the rows commit
        (``index_type`` defaults to ``"IVF_PQ"``; other keys such as ``num_partitions`` and
        ``num_sub_vectors`` go to ``LanceDataset.create_index``). ``resume`` as for
        ``write_parquet``.
        """
        from vane.io.tables.lance import LanceSink, VectorIndex

        sink = LanceSink(
            uri,
            mode,
            max_rows_per_file,
            data_storage_version,
            storage_options,
            VectorIndex.parse(vector_index),
        )
        return current_runner().write(self._plan, sink, resume=_resume(resume, "write_lance"))

    @checked
    def write_deltalake(
        self,
        table_uri: str,
        *,
        mode: Literal["error", "append", "overwrite"] = "error",
        partition_by: str | Sequence[str] | None = None,
        schema_mode: Literal["merge", "overwrite"] | None = None,
        target_file_size: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        resume: Resume = False,
    ) -> WriteResult:
        """Stream the rows into a Delta Lake table (delta-rs), committed as one new version:
        on failure the table stays at its previous version.

        ``mode``: ``"error"`` (the default; an existing table is an error), ``"append"`` or
        ``"overwrite"``; ``schema_mode="merge"`` or ``"overwrite"`` lets the table's columns
        change; ``partition_by`` writes hive-style partitions. ``resume`` as for
        ``write_parquet``.
        """
        from vane.io.tables.delta import DeltaSink

        sink = DeltaSink(
            table_uri,
            mode,
            _as_tuple(partition_by, "partition_by"),
            schema_mode,
            storage_options,
            target_file_size,
        )
        return current_runner().write(self._plan, sink, resume=_resume(resume, "write_deltalake"))

    @checked
    def write_iceberg(
        self,
        table: Any,
        *,
        mode: Literal["append", "overwrite"] = "append",
        catalog_kwargs: Mapping[str, Any] | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Stream the rows into an Iceberg table (pyiceberg), committed as one new snapshot:
        on failure the table stays at its previous snapshot.

        ``table``: a ``pyiceberg.table.Table``, or an identifier (``"namespace.table"``) in
        the catalog ``catalog_kwargs`` describe (as for ``vane.read_iceberg``); an identifier
        that names no table yet is created with the relation's columns. ``mode``: ``"append"``
        (the default) or ``"overwrite"``.
        """
        from vane.io.tables.iceberg import IcebergSink

        sink = IcebergSink(table, mode, catalog_kwargs, snapshot_properties, storage_options)
        return current_runner().write(self._plan, sink)

    @checked
    def write_parquet(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
    ) -> WriteResult:
        """Stream the rows into Parquet files under ``path`` (or one file if ``path`` ends in
        ``.parquet``), committed atomically: on failure ``path`` is left as it was.

        ``mode``: ``"error"`` if ``path`` exists, ``"overwrite"`` replaces it on success,
        ``"append"`` adds files on success. ``partition_by`` writes hive-style ``key=value``
        directories; ``rows_per_file`` caps each file's rows.

        ``path`` may be a URL (``s3://bucket/out/``, ``gs://...``, any fsspec protocol), with
        ``storage_options`` for its credentials; an object store commits through a manifest
        written last (docs/io.md, "Where your data lives").

        ``resume=True`` keeps each UDF step's answers as they come (beside ``path``), so a rerun
        of the same pipeline after a crash, Ctrl-C or ``kill -9`` pays only for the batches no
        run had answered, and the output still holds every row once (docs/resume.md).
        ``resume="restart"`` drops work saved for another pipeline and starts over.
        """
        return self._write(
            "parquet", path, mode, partition_by, rows_per_file, storage_options, resume=resume
        )

    @checked
    def write_csv(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
    ) -> WriteResult:
        """Like ``write_parquet``, as CSV files with a header row."""
        return self._write(
            "csv", path, mode, partition_by, rows_per_file, storage_options, resume=resume
        )

    @checked
    def write_json(
        self,
        path: str,
        *,
        mode: WriteMode = "error",
        partition_by: str | Sequence[str] | None = None,
        rows_per_file: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: Resume = False,
    ) -> WriteResult:
        """Like ``write_parquet``, as newline-delimited JSON files (one object per row)."""
        return self._write(
            "json", path, mode, partition_by, rows_per_file, storage_options, resume=resume
        )


def _storage(
    path: object, options: Mapping[str, Any] | None, caller: str
) -> tuple[tuple[str, Any], ...] | None:
    """The store options of a remote destination (None for a local path, which takes none)."""
    from vane.io import storage

    if not isinstance(path, str) or not storage.is_remote(path):
        if options:
            raise ConfigurationError(
                f"{caller}(): storage_options apply to remote paths (s3://...), and "
                f"{path!r} is local"
            )
        return None
    return storage.locate(path, options, caller).store.options
