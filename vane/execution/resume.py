"""What a resumable write (``resume=True``) needs from the plan: a fingerprint of the job, so a
rerun is known to be the same job (``vane/io/resume.py`` keeps the work and compares), and a
key for each batch a UDF step is given, under which its answer is kept.

A batch's key is its place in the step's input where the plan below the step gives the same
rows in the same order on every run (``input_identity``: files read as they were, row by row
steps of functions that give the same value for the same arguments, a limit; nothing that
reorders, combines rows, reads the clock or draws random numbers, and no UDF step, whose
answers may change from run to run): the input's identity and the batch's first row and
length. Elsewhere it is a digest of every value of the batch (``batch_digest``), which finds
an answer again wherever the same input comes, at the cost of hashing every byte the
function is given: on a quick function, most of what ``resume=True`` costs.

A step's identity covers what decides its answers: the function's code (its bytecode and
constants, and those of the methods of a class, recursively through what the step holds, such
as a column UDF's function or an AI function's provider and options), the arguments it is
constructed and called with, its batch size (which decides how the input is cut), its
``on_error`` and its output schema. Object addresses in reprs are left out, so an argument
without a repr of its own does not make every run a new job; an object that changes from run
to run but means the same (a server per node: its port) says what it means with a
``__vane_identity__`` method.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import re
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from vane.backend.connection import VERSION as DUCKDB_VERSION
from vane.backend.connection import result_settings
from vane.io.files import is_uri
from vane.io.parts import Mark, Parts, worth_keeping
from vane.io.resume import ResumeStore
from vane.io.sinks import FileSink, Sink
from vane.ir.expr import Column, Expr, FunctionCall, SqlText, UdfCall
from vane.ir.parse import is_repeatable
from vane.plan.explain import explain
from vane.plan.nodes import (
    Drop,
    FileScan,
    Filter,
    Limit,
    PlanNode,
    RangeScan,
    Rename,
    Select,
    UdfStep,
    WithColumns,
)
from vane.plan.rows import one_for_one
from vane.plan.traverse import walk
from vane.udf.runtime import BatchOutcome, RowError

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DEPTH = 10
_ITEMS = 256  # a longer list or dict is described by a hash of its text


def step_key(node: UdfStep) -> str:
    """The folder name of a step's saved answers: its name and a digest of its identity."""
    spec = node.udf
    parts = [
        spec.verb,
        spec.kind,
        str(spec.rows_per_batch),
        spec.batch_format,
        spec.on_error,
        spec.error_column,
        str(spec.reads),
        str(spec.passthrough),
        str(node.declared_schema),
        _digest(spec.fn),
        _digest(spec.constructor_args),
        _digest(spec.constructor_kwargs),
        _digest(spec.fn_args),
        _digest(spec.fn_kwargs),
    ]
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=12).hexdigest()
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.name)[:40]
    return f"{safe}-{digest}"


def fingerprint(plan: PlanNode) -> dict[str, Any]:
    """The job, as ``pipeline.json`` records it: its plan's text, each UDF step's identity and
    its input files (size and modification time)."""
    steps: dict[str, str] = {}
    inputs: dict[str, list[int]] = {}
    for node in walk(plan):
        if isinstance(node, UdfStep):
            name = node.udf.name
            while name in steps:  # two steps of one function: "embed", "embed #2"
                name = f"{node.udf.name} #{len(steps)}"
            steps[name] = step_key(node)
        elif isinstance(node, FileScan):
            for path, stamp in (node.stamps or {}).items():
                inputs[path] = [int(part) for part in stamp[2:]]
    return {"plan": explain(plan), "steps": steps, "inputs": inputs}


def what_decides_rows() -> dict[str, str]:
    """What besides a plan decides the rows DuckDB gives for it, in their order: its settings
    that decide values and order (``result_settings``), and the versions of DuckDB, Arrow and
    vane."""
    versions = f"duckdb {DUCKDB_VERSION} pyarrow {pa.__version__} vane {_vane_version()}"
    return {**result_settings(), _VERSIONS: versions}


_VERSIONS = "(versions)"  # (no setting's name: DuckDB's have no parentheses)


def input_identity(
    node: PlanNode, settings: Callable[[], Mapping[str, str]] = what_decides_rows
) -> str | None:
    """An identity of the rows ``node`` gives, in their order, if every run of it gives the
    same ones (``node`` is a UDF step's input; see the module's text), else None: then a batch
    is known by its values (``batch_digest``). It covers each node's every field (the files'
    stamps: ``_same_files``; each expression whole), DuckDB's settings that decide
    values and order, and the versions of DuckDB, Arrow and vane, so that a rerun finds an
    answer by its place only where the same rows come there. ``settings``: where those settings
    and versions are read from (a test gives fixed ones, to pin the identity's value)."""
    rows = _rows_alike(node)
    if rows is None:
        return None
    parts = list(rows)
    values = dict(settings())
    if values.get("preserve_insertion_order") != "true":
        return None  # (DuckDB may then give the rows in another order on each run)
    versions = values.pop(_VERSIONS, "")
    parts.append(repr(sorted(values.items())))
    parts.append(versions)  # (apart, as before 3692dad: the same identity as a run of then)
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=10).hexdigest()


def parts_step(plan: PlanNode, sink: Sink) -> tuple[UdfStep, FileSink] | None:
    """The UDF step after whose answers a resumable write to ``sink`` may cut its output into
    kept parts (``io/parts.py``), if there is one, with the sink: a local folder of Parquet or
    CSV files, not partitioned nor cut by rows, written from the plan's only UDF step,
    answering in order, through steps that keep each of its rows as one row, in order (so the
    output's rows are the step's, counted alike), from an input every run gives alike. Its
    batches must also be known by their place in the input (``input_identity``, which also
    asks DuckDB's settings), which the write learns as the step's stage begins."""
    if not isinstance(sink, FileSink) or sink.single_file or sink.format == "json":
        return None
    if is_uri(sink.path) or sink.partition_by or sink.rows_per_file is not None:
        return None
    node = plan
    while not isinstance(node, UdfStep) and _passes_rows_through(node):
        node = node.inputs[0]
    if not isinstance(node, UdfStep) or sum(isinstance(n, UdfStep) for n in walk(plan)) != 1:
        return None
    spec = node.udf
    if not spec.preserve_order or spec.batch_bytes is not None:
        return None
    if _rows_alike(node.input) is None:  # (known by their values: DuckDB's settings not asked)
        return None
    return node, sink


def parts_held(plan: PlanNode, step: UdfStep, identity: str) -> str:
    """An identity of what kept parts of ``plan``'s output hold, which they are recorded under:
    ``step``'s answers (its function and options: ``step_key``) to the input of that identity,
    through the steps above it, each whole. (The pipeline's record says the function too; a
    folder whose record is gone, left by a kill as a committed job's saved work was removed,
    must not hand another function's rows on.)"""
    what = f"{identity}\0{step_key(step)}\0{_above(plan, step)}"
    return hashlib.blake2b(what.encode(), digest_size=10).hexdigest()


def _passes_rows_through(node: PlanNode) -> bool:
    """Whether the SQL step ``node`` surely gives one row for each row of its input, in order
    (``one_for_one``), each the same on every run (``_repeatable``: a ``now()`` above the step
    would differ from one part to the next, and from a kept part to the rerun's)."""
    if not one_for_one(node):
        return False
    if not isinstance(node, (Select, WithColumns)):
        return True  # (a drop or a rename)
    columns = {name.lower() for name in node.input.schema.names}
    return all(_repeatable(expr, columns) for expr in node.expressions())


def _above(plan: PlanNode, step: UdfStep) -> str:
    """The steps from ``plan`` down to ``step``, each whole (every field, every literal: the
    plan's explain() shortens long ones), which the kept parts' rows went through."""
    parts: list[str] = []
    node = plan
    while node is not step:
        fields = [f for f in dataclasses.fields(node) if f.name != "input"]  # type: ignore[arg-type]
        parts.append(f"{type(node).__name__} {_text(tuple(getattr(node, f.name) for f in fields))}")
        node = node.inputs[0]
    return "\0".join(parts)


def position_key(identity: str, first: int, rows: int) -> str:
    """The key of the answer to the ``rows`` input rows from row ``first`` of an input of this
    identity (``input_identity``); a digest (``batch_digest``) never begins with "@"."""
    return f"@{identity}:{first}+{rows}"


# Store options that say who is asking rather than where the objects are: never recorded.
_SECRET = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


# What ``_same_rows`` found of a node, kept as long as the node: a resumable write asks it of
# its UDF step's input twice (``parts_step``, then ``input_identity``), and a plan's long
# literal lists make it long to write out. (Plan nodes are immutable and hash by identity.)
_ROWS_FOUND: weakref.WeakKeyDictionary[PlanNode, tuple[str, ...] | None] = (
    weakref.WeakKeyDictionary()
)


def _rows_alike(node: PlanNode) -> tuple[str, ...] | None:
    """What says which rows ``node`` gives if every run of it gives the same ones, else None."""
    try:
        return _ROWS_FOUND[node]
    except KeyError:
        pass
    parts: list[str] = []
    found = tuple(parts) if _same_rows(node, parts) else None
    _ROWS_FOUND[node] = found
    return found


def _same_rows(node: PlanNode, parts: list[str]) -> bool:
    if isinstance(node, FileScan):
        return _same_files(node, parts)
    if isinstance(node, RangeScan):
        parts.append(f"range {node.n}")
        return True
    if isinstance(node, (Select, Filter, WithColumns, Drop, Rename)):
        if not node.row_local:
            return False
        columns = {name.lower() for name in node.input.schema.names}
        if not all(_repeatable(expr, columns) for expr in node.expressions()):
            return False
    elif not isinstance(node, Limit):  # (in order: DuckDB keeps the rows' order below it)
        return False  # a source read otherwise, a step that reorders or combines, a UDF step
    fields = [f for f in dataclasses.fields(node) if f.name != "input"]
    parts.append(f"{type(node).__name__} {_text(tuple(getattr(node, f.name) for f in fields))}")
    return all(_same_rows(child, parts) for child in node.inputs)


def _same_files(node: FileScan, parts: list[str]) -> bool:
    """Whether ``node`` reads files whose stamps say what they hold, recording them: a local
    file's inode, size and modification time (not its device number, which may change when the
    machine restarts), an object's ETag, size and time (an object with neither an ETag nor a
    time, as an HTTP server may give, is not known well enough). For objects, the store's
    options that say where they are, and no ``filename`` column: DuckDB names a remote file by
    the name this process registered its store under, which another process may name otherwise."""
    stamps = node.stamps or {}
    if any(path not in stamps for path in node.files):
        return False
    seen = [stamps[path][1:] for path in node.files]
    if node.storage is not None:
        if any(tag == 0 and time == 0 for tag, _, time in seen):
            return False
        if dict(node.options).get("filename"):
            return False
        where = sorted((k, repr(v)) for k, v in node.storage if not _SECRET.search(k))
        parts.append(f"store {where}")
    parts.append(f"{node.format} {node.files!r} {node.options!r} {node.columns!r} {seen}")
    return True


def _repeatable(expr: Expr, columns: set[str]) -> bool:
    """Whether ``expr`` gives a row the same value on every run, given the step's input
    columns: no UDF, only functions DuckDB's catalog calls repeatable, and no name that is not
    a column (``current_date`` in SQL text is the clock)."""
    for part in expr.walk():
        if isinstance(part, UdfCall):
            return False
        if isinstance(part, FunctionCall) and not is_repeatable(part.name):
            return False
        if isinstance(part, Column) and part.name.lower() not in columns:
            return False
        if isinstance(part, SqlText):
            parsed = part.parsed
            if parsed.columns is None or not parsed.row_local:
                return False
            if not {name.lower() for name in parsed.columns} <= columns:
                return False
            if not all(is_repeatable(function) for function in parsed.functions):
                return False
    return True


def _text(value: Any) -> str:
    """``value`` whole: an expression's kind and every field, a literal's type and repr."""
    if isinstance(value, Expr):
        fields = dataclasses.fields(value)  # type: ignore[arg-type]
        return f"{type(value).__name__}({_text(tuple(getattr(value, f.name) for f in fields))})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_text(item) for item in value) + ")"
    return f"{type(value).__name__}:{value!r}"


@functools.cache
def _vane_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vane-data")
    except PackageNotFoundError:
        return "?"


def batch_digest(shipped: pa.Table) -> str:
    """A digest of every value of every column a batch gives the function, in order: SHA-256
    (cut to 160 bits) of the batch's Arrow IPC messages, its schema's and each record batch's.
    Arrow frames each message with its length and writes only a slice's values, so the bytes
    say the batch exactly; SHA-256 because the processors this runs on compute it in hardware
    (about twice BLAKE2b's speed on the benchmark's machine: half the digest's cost), and no
    message is built as a stream (whose writer costs more than hashing a small batch)."""
    hasher = hashlib.sha256(shipped.schema.serialize())
    for batch in shipped.to_batches():
        hasher.update(batch.serialize())
    return hasher.hexdigest()[:40]


class Checkpoint:
    """One UDF step's saved answers in a resumable write."""

    def __init__(
        self,
        store: ResumeStore,
        key: str,
        position: str | None = None,
        parts: Parts | None = None,
        *,
        paid: bool = False,
    ) -> None:
        self.store = store
        self.key = key
        # The step's calls await something paid for (an async function: a server, an API):
        # its answers are kept however quick the calls, parts or none.
        self.paid = paid
        # The step's input's identity, where its batches are known by their place in it
        # (``input_identity``); None: by their values.
        self.position = position
        # The output's kept parts, where the write keeps them (``io/parts.py``): the step
        # skips the input rows they hold, marks where its output may be cut, and keeps in the
        # log only the answers whose calls cost far more than keeping them.
        self.parts = parts
        # No answer of the step was kept when it began, and its batches are known by their
        # places, each asked once a run: none is found, and none is looked for.
        self.none_kept = position is not None and self._kept_before == 0

    @property
    def skip(self) -> int:
        """The step's first input rows, whose answers are in kept parts of the output."""
        return 0 if self.parts is None else self.parts.done.input

    @property
    def done(self) -> Mark:
        """Where the kept parts of the output end, in the step's rows and counts."""
        return Mark(0, 0) if self.parts is None else self.parts.done

    def mark(self, output: int, input_rows: int, skipped: int, nulled: int) -> None:
        """Where the answer the step hands on next ends, in the step's output and input rows
        and the rows on_error skipped and nulled up to there (``parts.Marks``)."""
        if self.parts is not None:
            self.parts.marks.add(Mark(output, input_rows, skipped, nulled))

    @functools.cached_property
    def _kept_before(self) -> int:
        """The step's answers the runs before this one kept, counted once, before its stage
        keeps any (and only where asked: on Ray, whose driver does not, it reads every log)."""
        return self.store.count(self.key)

    def nothing_saved(self) -> bool:
        """Whether the write saved nothing of the step: no kept part, no kept answer."""
        return not self.skip and self._kept_before == 0

    def answers_kept(self) -> int:
        """How many of the step's answers a run kept (under any key), but those of the input
        rows that kept parts of the output hold (a rerun does not ask for them)."""
        if not self.skip or self.position is None:
            return self.store.count(self.key)
        prefix = f"@{self.position}:"
        return sum(
            1
            for key in self.store.keys(self.key)
            if not key.startswith(prefix) or int(key[len(prefix) :].split("+")[0]) >= self.skip
        )

    def get(self, digest: str) -> BatchOutcome | None:
        """The answer kept under ``digest`` (the batch's key: ``position_key`` or
        ``batch_digest``), if a run kept it."""
        saved = self.store.get(self.key, digest)
        if saved is None:
            return None
        meta = saved.meta
        return BatchOutcome(
            saved.table,
            rows_skipped=int(meta.get("rows_skipped", 0)),
            rows_nulled=int(meta.get("rows_nulled", 0)),
            first_error=meta.get("first_error"),
            dropped=[int(i) for i in meta.get("dropped", [])],
            poisoned=[str(p) for p in meta.get("poisoned", [])],
            errors=[RowError(int(r), str(e), int(a)) for r, e, a in meta.get("errors", [])],
        )

    def put(self, digests: list[str], starts: list[int], outcome: BatchOutcome, rows: int) -> None:
        """Keep ``outcome``, the answer to ``rows`` input rows in calls beginning at ``starts``
        (a unit of several, or one), each call's under its batch's digest, as if it had been
        sent alone: a rerun cuts its units otherwise, and finds each call's answer."""
        if self.keeps(outcome, len(digests)):
            self._put_calls(digests, starts, outcome, rows)

    def keeps(self, outcome: BatchOutcome, calls: int) -> bool:
        """Whether ``put`` keeps ``outcome``, the answer to ``calls`` calls: always, unless the
        output is kept in parts; then only a call that counted requests or tokens, or an async
        one (awaiting a server: paid for, whatever its time, and never asked again), or one
        that cost far more than keeping its answer (``worth_keeping``)."""
        if self.parts is None or self.paid or outcome.usage:
            return True
        # (the answer's size as its buffers', which a slice of a larger table overstates: the
        # call is then less likely kept; ``nbytes`` walks them and lets go of the GIL, which a
        # busy thread then waits to take back: about 0.1 ms a unit, measured)
        calls = max(1, calls)
        seconds = outcome.seconds / calls
        if not worth_keeping(seconds, 0):
            return False  # (not even an empty answer would be: its size need not be walked)
        return worth_keeping(seconds, outcome.table.get_total_buffer_size() / calls)

    def _put_calls(
        self, digests: list[str], starts: list[int], outcome: BatchOutcome, rows: int
    ) -> None:
        if outcome.failure is not None:
            # A unit whose call failed part-way: the calls before it answered in whole (each
            # began a piece of the answer), and are kept; the failed one and those after not.
            begun = {piece.input_row for piece in outcome.pieces()}
            answered = next((i for i, start in enumerate(starts) if start not in begun), 0)
            if answered == 0:
                return
            digests, rows, starts = digests[:answered], starts[answered], starts[:answered]
        calls = [outcome] if len(digests) == 1 else outcome.calls_of(starts, rows)
        if calls is None:
            # (a call that does not begin where a piece of the answer does: not kept, so a
            # rerun asks again; never a wrong answer under a batch's digest)
            return
        for digest, call in zip(digests, calls, strict=True):
            self._put(digest, call)

    def _put(self, digest: str, outcome: BatchOutcome) -> None:
        meta = {
            "rows_skipped": outcome.rows_skipped,
            "rows_nulled": outcome.rows_nulled,
            "first_error": outcome.first_error,
            "dropped": outcome.dropped,
            "poisoned": outcome.poisoned,
            "errors": [[e.row, e.error, e.attempts] for e in outcome.errors],
        }
        self.store.put(self.key, digest, outcome.table, meta)


def _digest(value: Any) -> str:
    return hashlib.blake2b(_describe(value, _DEPTH).encode(), digest_size=16).hexdigest()


def _describe(value: Any, depth: int) -> str:
    """A text that changes when the code or data of ``value`` does."""
    if depth <= 0:
        return type(value).__qualname__
    identity = getattr(type(value), "__vane_identity__", None)
    if callable(identity) and not isinstance(value, type):
        return str(identity(value))  # what stays the same from run to run (a server's name)
    inner = depth - 1
    if isinstance(value, functools.partial):
        return (
            f"partial({_describe(value.func, inner)}, {_describe(value.args, inner)}, "
            f"{_describe(value.keywords, inner)})"
        )
    if isinstance(value, (types.FunctionType, types.MethodType)):
        function = value.__func__ if isinstance(value, types.MethodType) else value
        defaults = _describe(function.__defaults__, inner)
        name = f"{function.__module__}.{function.__qualname__}"
        return f"fn {name} {_code(function.__code__)} {defaults}"
    if isinstance(value, type):
        members = []
        for name, member in sorted(vars(value).items()):
            target = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(target, types.FunctionType):
                members.append(f"{name}={_code(target.__code__)}")
        bases = ",".join(b.__qualname__ for b in value.__mro__[1:])
        return f"class {value.__module__}.{value.__qualname__}({bases}) {' '.join(members)}"
    if isinstance(value, (list, tuple)):
        if len(value) > _ITEMS:  # a large constant: its text, hashed
            return f"{type(value).__name__}#{_hash(repr(value))}"
        return f"{type(value).__name__}[{', '.join(_describe(v, inner) for v in value)}]"
    if isinstance(value, Mapping):
        if len(value) > _ITEMS:
            return f"{type(value).__name__}#{_hash(repr(sorted(map(str, value.items()))))}"
        items = sorted((str(k), _describe(v, inner)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [
            f"{f.name}={_describe(getattr(value, f.name), inner)}"
            for f in dataclasses.fields(value)
        ]
        return f"{type(value).__qualname__}({', '.join(fields)})"
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return repr(value)
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and not inspect.isbuiltin(value):
        # An object of a class: its class's code and what it holds (a recorded @vane.cls
        # instance: its constructor's arguments; an AI function's provider: its options).
        return f"instance of {_describe(type(value), inner)} {_describe(state, inner)}"
    return _ADDRESS.sub("", repr(value))


def _hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _code(code: types.CodeType) -> str:
    consts = [_code(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    digest = hashlib.blake2b(code.co_code, digest_size=12).hexdigest()
    return f"{digest}:{','.join(consts)}:{','.join(code.co_names)}"
