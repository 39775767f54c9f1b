"""The actions: what runs the plan (rows out, counted, shown, kept) and what describes it
(``explain``, with ``analyze=True`` after running it)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane._arguments import checked
from vane.config import get_config
from vane.errors import ConfigurationError
from vane.execution.runner import current_runner
from vane.plan import nodes
from vane.plan.explain import explain as explain_plan
from vane.plan.nodes import UdfStep
from vane.plan.traverse import walk
from vane.relation.verbs import RelationalVerbs
from vane.types import describe_schema

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Self  # typing.Self from Python 3.11


def _with_servers(text: str) -> str:
    """The plan's text, then the servers (``vane.ai.serve``) its steps send requests to: the
    steps name theirs (``via <server>``), and each server's nodes, GPUs, ports and command
    follow. No server can run before ``vane.ai.servers`` is imported: then there is nothing to
    add, and nothing is imported for it."""
    servers = sys.modules.get("vane.ai.servers")
    return text if servers is None else text + servers.describe_used(text)


class Actions(RelationalVerbs):
    """explain, materialize, count, to_arrow/pandas/pylist, iter_batches, iteration, show."""

    __slots__ = ()

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

    def materialize(self) -> Self:
        """Run the plan now and keep its result, so later actions reuse it instead of running
        the plan (and its models) again. The result stays in memory up to
        ``vane.configure(memory_budget=...)`` and spills to temporary Parquet files beyond it;
        they are deleted when the returned relation is no longer used.

        >>> import vane
        >>> kept = vane.range(3).with_column("sq", "id * id").materialize()
        >>> kept.count(), kept.to_pylist()[2]
        (3, {'id': 2, 'sq': 4})
        """
        return self._derive(current_runner().materialize(self._plan))

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
