"""The error ledger of a write (``write_*(errors_to=...)``) and the retry of its rows
(``Relation.retry_failed``), as far as the plan is concerned.

A ledger holds one row per input row that a UDF step's ``on_error="skip"`` dropped or
``"null"`` nulled: that row's key columns (by default every input column of the step, so the
row can be run again as it was; ``errors_key=`` names fewer, and a retry then finds the rows
again in the step's input by those keys), then ``step`` (the step's name as ``explain()``
shows it; ``"embed #2"`` for a second step of one name), ``error_type``, ``error_message`` and
``attempts`` (the calls of the function the row was in, bisection included). Its Parquet
metadata says which steps it covers, with their keys and ``on_error``: a retry checks that the
pipeline it runs is the one that wrote it.

A retry runs each failed row from the step that failed it: the step's input is replaced by the
ledger's rows (or, with fewer key columns, by its own input filtered to those keys), the steps
above it run as in the job, and the pieces of several steps are one union. Only steps that
answer row by row may lie above a retried step (no sort, aggregate, join or limit), since the
retried rows are added to an output that holds the others already.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from vane.errors import ConfigurationError, LedgerError
from vane.plan.nodes import Join, LedgerScan, PlanNode, UdfStep, Union
from vane.plan.traverse import walk, with_inputs
from vane.udf.runtime import RowError

# The columns a ledger adds after the key columns, and its Parquet metadata's key.
COLUMNS = ("step", "error_type", "error_message", "attempts")
METADATA = b"vane.ledger"
_TYPED = re.compile(r"([A-Za-z_][\w.]*(?:\([\w.]*\))?): (.*)", re.DOTALL)

Recorder = Callable[[pa.Table, Sequence[RowError]], None]


def step_labels(plan: PlanNode) -> dict[int, str]:
    """Each UDF step's name in a ledger, by step id: its name, and for a second step of the
    same name ``"name #2"`` (counted from the top of the plan, as ``walk`` visits it)."""
    labels: dict[int, str] = {}
    seen: dict[str, int] = {}
    for node in walk(plan):
        if isinstance(node, UdfStep) and node.step_id not in labels:
            name = node.udf.name
            seen[name] = seen.get(name, 0) + 1
            labels[node.step_id] = name if seen[name] == 1 else f"{name} #{seen[name]}"
    for node in walk(plan):  # a retry's steps keep the names the job gave them
        if isinstance(node, LedgerScan):
            labels.update(dict(node.labels))
    return labels


def retried_keys(plan: PlanNode) -> dict[str, tuple[str, ...]]:
    """For a retry's write, each step's key columns in the ledger it replaces, by name."""
    keys: dict[str, tuple[str, ...]] = {}
    for node in walk(plan):
        if isinstance(node, LedgerScan):
            keys.update(dict(node.keys))
    return keys


def split_error(text: str) -> tuple[str, str]:
    """``"ValueError: bad row"`` as its type and message (a text with no type: ``"Error"``)."""
    found = _TYPED.fullmatch(text)
    if found:
        return found.group(1), found.group(2)
    if re.fullmatch(r"[A-Za-z_][\w.]*", text):
        return text, ""
    return "Error", text


class Ledger:
    """The rows one write's UDF steps failed, gathered as the steps run (from any thread)."""

    def __init__(self, plan: PlanNode, path: str, key: Sequence[str] | None, caller: str) -> None:
        self.path = path
        labels = step_labels(plan)
        kept = retried_keys(plan)  # a retry keeps the keys of the ledger it replaces
        steps = [
            node
            for node in walk(plan)
            if isinstance(node, UdfStep) and node.udf.on_error in ("skip", "null")
        ]
        if not steps:
            raise ConfigurationError(
                f"{caller}(errors_to={path!r}): no step of this pipeline keeps going past a "
                "failing row, so no row could reach the ledger. Pass on_error='skip' (or "
                "'null') to the UDF step or AI function whose failures you mean to keep, or "
                "leave errors_to out"
            )
        fields: dict[str, pa.Field] = {}
        self._keys: dict[int, list[str]] = {}
        self._labels: dict[int, str] = {}
        described: dict[str, Any] = {}
        for node in steps:
            label = labels[node.step_id]
            names = list(key or kept.get(label) or node.input.schema.names)
            missing = [n for n in names if n not in node.input.schema.names]
            if missing:
                raise ConfigurationError(
                    f"{caller}(errors_key=...): step `{labels[node.step_id]}` has no input "
                    f"column {missing[0]!r}; its input has {', '.join(node.input.schema.names)}. "
                    "Name columns that every step with on_error='skip' or 'null' is given"
                )
            for name in names:
                if name in COLUMNS:
                    raise ConfigurationError(
                        f"{caller}(errors_to=...): the input column {name!r} of step "
                        f"`{labels[node.step_id]}` has the name of a ledger column "
                        f"({', '.join(COLUMNS)}). Pass errors_key= with columns that identify "
                        "a row without it, or rename it"
                    )
                field = node.input.schema.field(name)
                if name in fields and fields[name].type != field.type:
                    raise ConfigurationError(
                        f"{caller}(errors_to=...): column {name!r} is {fields[name].type} in "
                        f"the input of one step and {field.type} in another's, and a ledger "
                        "has one column of each name. Pass errors_key= with columns of one type"
                    )
                fields.setdefault(name, field)
            self._keys[node.step_id] = names
            self._labels[node.step_id] = labels[node.step_id]
            described[labels[node.step_id]] = {"keys": names, "on_error": node.udf.on_error}
        metadata = {METADATA: json.dumps({"version": 1, "steps": described}).encode()}
        self.schema = pa.schema(
            [
                *fields.values(),
                pa.field("step", pa.string()),
                pa.field("error_type", pa.string()),
                pa.field("error_message", pa.string()),
                pa.field("attempts", pa.int64()),
            ],
            metadata=metadata,
        )
        self._tables: list[pa.Table] = []
        self._lock = threading.Lock()

    def recorder(self, node: UdfStep) -> Recorder | None:
        """What ``node``'s stage calls with a batch's input rows and the errors among them."""
        keys = self._keys.get(node.step_id)
        if keys is None:
            return None
        label = self._labels[node.step_id]

        def record(rows: pa.Table, errors: Sequence[RowError]) -> None:
            taken = rows.select(keys).take(pa.array([e.row for e in errors], pa.int64()))
            split = [split_error(e.error) for e in errors]
            columns = {
                f.name: taken[f.name] if f.name in keys else pa.nulls(len(errors), f.type)
                for f in self.schema
                if f.name not in COLUMNS
            }
            columns["step"] = pa.array([label] * len(errors), pa.string())
            columns["error_type"] = pa.array([t for t, _ in split], pa.string())
            columns["error_message"] = pa.array([m for _, m in split], pa.string())
            columns["attempts"] = pa.array([e.attempts for e in errors], pa.int64())
            table = pa.table(columns).cast(self.schema)
            with self._lock:
                self._tables.append(table)

        return record

    def table(self) -> pa.Table:
        """Every row recorded so far (none: an empty table of the ledger's columns)."""
        with self._lock:
            tables = list(self._tables)
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables).replace_schema_metadata(self.schema.metadata)


def described_steps(table: pa.Table, path: str) -> dict[str, dict[str, Any]]:
    """The steps a ledger file says it covers (its metadata), or a ``LedgerError``."""
    raw = (table.schema.metadata or {}).get(METADATA)
    missing = [c for c in COLUMNS if c not in table.schema.names]
    if raw is None or missing:
        raise LedgerError(
            f"{path!r} is a Parquet file but not an error ledger (it lacks vane's ledger "
            "metadata and columns). Pass the path a write was given as errors_to="
        )
    steps: dict[str, dict[str, Any]] = json.loads(raw)["steps"]
    return steps


def retry_plan(
    plan: PlanNode, table: pa.Table, path: str, output: tuple[str, tuple[str, ...]] | None
) -> PlanNode:
    """``plan`` (optimized) run again on the rows of the ledger ``table`` read from ``path``:
    each row from the step that failed it (see the module's text); ``output``: the output the
    ledger goes with, and its files then, for the retry's write to check."""
    steps = described_steps(table, path)
    labels = step_labels(plan)
    by_label = {labels[n.step_id]: n for n in walk(plan) if isinstance(n, UdfStep)}
    unknown = [label for label in steps if label not in by_label]
    if unknown:
        raise LedgerError(
            f"retry_failed({path!r}): the ledger is of another pipeline: its step "
            f"`{unknown[0]}` is not a step of this one (whose UDF steps are "
            f"{', '.join(f'`{n}`' for n in by_label) or 'none'}). Retry it with the pipeline "
            "whose write made it"
        )
    keep = sorted(labels.items())
    keyed = tuple(sorted((label, tuple(d["keys"])) for label, d in steps.items()))
    pieces: list[PlanNode] = []
    for label, described in steps.items():
        node = by_label[label]
        keys = [str(k) for k in described["keys"]]
        if described.get("on_error") == "null" or node.udf.on_error == "null":
            raise LedgerError(
                f"retry_failed({path!r}): step `{label}` kept its failing rows in the output as "
                "nulls (on_error='null'), so adding their answers would hold those rows twice. "
                "Write the job with on_error='skip' to retry its failed rows, or rerun it whole"
            )
        names = node.input.schema.names
        absent = [k for k in keys if k not in names]
        if absent:
            raise LedgerError(
                f"retry_failed({path!r}): the ledger is of another pipeline: step `{label}` has "
                f"no input column {absent[0]!r} here (its input: {', '.join(names)}). Retry it "
                "with the pipeline whose write made it"
            )
        import pyarrow.compute as pc  # (on first use: 40 ms of a first result)

        rows = table.filter(pc.equal(table["step"], label)).select(keys)
        if not rows.num_rows:
            continue  # (a step below would run on every row to find none)
        if set(keys) == set(names):  # the whole row is kept: run it from this step
            replayed = rows.select(names).cast(node.input.schema)
            source: PlanNode = LedgerScan(replayed, path, tuple(keep), keyed, output)
        else:  # the step's input, filtered to the kept keys (steps below it run again)
            _check_below(node, label, path)
            distinct = rows.group_by(keys).aggregate([])
            scan = LedgerScan(distinct, path, tuple(keep), keyed, output)
            source = Join(node.input, scan, "semi", tuple(keys))
        pieces.append(_replaced(plan, node, with_inputs(node, (source,)), label, path))
    if not pieces:  # an empty ledger: the pipeline's rows from its first step, which are none
        first = next(iter(steps))
        node = by_label[first]
        empty = LedgerScan(node.input.schema.empty_table(), path, tuple(keep), keyed, output)
        pieces.append(_replaced(plan, node, with_inputs(node, (empty,)), first, path))
    combined = pieces[0]
    for piece in pieces[1:]:
        combined = Union(combined, piece)
    return combined


def _check_below(node: UdfStep, label: str, path: str) -> None:
    """Found again by its keys, a row runs through the steps below its step again, with every
    other row: one of them that drops or nulls rows could fail a row the output holds
    already, and the next retry would add that row a second time."""
    for below in walk(node.input):
        if isinstance(below, UdfStep) and below.udf.on_error != "raise":
            raise LedgerError(
                f"retry_failed({path!r}): the ledger keeps only some columns of the rows step "
                f"`{label}` failed (errors_key=), so a retry finds them again by running the "
                f"steps below it on every row; step `{below.udf.name}` there has "
                f"on_error={below.udf.on_error!r} and could fail rows the output holds "
                "already, which a later retry would add twice. Write the job without "
                "errors_key (the ledger then keeps whole rows, run again from their step)"
            )


def check_retry(plan: PlanNode, errors_to: str | None, caller: str, output: str = "") -> None:
    """A write of ``retry_failed``'s rows must replace the ledger they came from in its commit:
    else a second write of them would add the rows that succeed a second time. It goes to the
    output the ledger goes with, unchanged since (where the ledger recorded its files)."""
    import os

    from vane.io.ledger import check_output

    for node in walk(plan):
        if isinstance(node, LedgerScan):
            same = errors_to is not None and os.path.realpath(
                os.path.expanduser(errors_to)
            ) == os.path.realpath(os.path.expanduser(node.ledger))
            if not same:
                raise LedgerError(
                    f"{caller}(): these rows are a retry of the ledger {node.ledger!r}, and the "
                    f"write must replace that ledger as it commits, or a second retry would add "
                    f"the rows that succeed again. Pass errors_to={node.ledger!r} (with "
                    "mode='append' to add them to the job's output)"
                )
            if node.output is not None and output:
                check_output(node.ledger, node.output, output)


def _replaced(
    plan: PlanNode, target: PlanNode, replacement: PlanNode, label: str, path: str
) -> PlanNode:
    """``plan`` with ``target`` replaced; every step above it must answer row by row."""
    holds: dict[int, bool] = {}

    def holds_target(node: PlanNode) -> bool:
        if id(node) not in holds:
            holds[id(node)] = node is target or any(holds_target(c) for c in node.inputs)
        return holds[id(node)]

    def rebuild(node: PlanNode) -> PlanNode:
        if node is target:
            return replacement
        if not holds_target(node):
            return node
        if not node.row_local:
            raise LedgerError(
                f"retry_failed({path!r}): step `{node.describe()}` above `{label}` needs all "
                "rows at once (a sort, aggregate, join, limit or union), so the retried rows "
                "cannot be added to the output the job wrote. Retry a pipeline whose steps after "
                "the failing one answer row by row, and sort or aggregate the output afterwards"
            )
        return with_inputs(node, tuple(rebuild(child) for child in node.inputs))

    return rebuild(plan)
