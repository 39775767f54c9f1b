"""Reading SQL text with DuckDB's own parser: which statement a query is, which columns an
expression uses, what it is named. Never regular expressions: DuckDB's tokenizer and parser
know its quoting, comments, lambdas and nested types, and stay in step with the engine.

The parser is reached through ``json_serialize_sql``, which returns the parse tree as JSON
without binding anything, so no data or catalog is touched.

DuckDB gives every position (a token's start, a node's ``query_location``) in UTF-8 bytes;
Python slices ``str`` by code points. ``str_offsets`` is the one conversion, and ``tokenize``
and every reader of ``query_location`` go through it: text with one ``é`` would otherwise be cut
one character off.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from vane import _engine
from vane.errors import PlanError

# Statement types a query may be: anything else would change the database when the plan is
# built (CREATE, COPY, ATTACH, SET, INSTALL, ...).
_QUERY = duckdb.StatementType.SELECT


def check_text(text: str, where: str) -> None:
    """A ``PlanError`` unless ``text`` can reach DuckDB, which takes UTF-8: a lone surrogate
    (what ``errors="surrogateescape"`` leaves of undecodable bytes) cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlanError(
            f"{where}: {text!r} holds a lone surrogate at position {exc.start}, which no SQL "
            "text can; decode the bytes it came from with errors='replace'"
        ) from None


def check_query(query: str, where: str) -> None:
    """``query`` is one read-only query statement, or a ``PlanError`` saying what it is."""
    check_text(query, where)
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise PlanError(f"{where}: the SQL does not parse: {_message(exc)}") from exc
    if len(statements) != 1:
        raise PlanError(
            f"{where}: the SQL holds {len(statements)} statements; a relation is one query. "
            "Pass one SELECT (or FROM / VALUES / WITH ...) statement"
        )
    kind = statements[0].type
    if kind != _QUERY:
        name = str(kind).rsplit(".", 1)[-1]
        hint = (
            " PIVOT without an IN list runs a query to find its columns: list the values, "
            "PIVOT t ON x IN ('a', 'b') USING ..."
            if name == "MULTI"
            else ""
        )
        raise PlanError(
            f"{where}: {name} statements are not queries; building a plan never changes the "
            "database or its settings. Pass one SELECT (or FROM / VALUES / WITH ...) statement, "
            f"and write results with write_parquet/write_csv/write_json.{hint}"
        )


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split())


@functools.lru_cache(maxsize=4096)
def serialize_sql(sql: str) -> str:
    """DuckDB's parse tree of ``sql`` as JSON text (``{"error": true, ...}`` if it does not
    parse)."""
    with _engine.scratch() as cursor:
        rows = cursor.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
    return str(rows[0][0])


def _parse_select(sql: str) -> dict[str, Any] | None:
    """The parse tree of the one SELECT node of ``sql``, or None if it does not parse as one."""
    tree = json.loads(serialize_sql(sql))
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        return None
    node: dict[str, Any] = tree["statements"][0]["node"]
    return node if node.get("type") == "SELECT_NODE" else None


def _parse_error(sql: str) -> str:
    """DuckDB's parser message for ``sql`` ("syntax error at or near ...")."""
    tree = json.loads(serialize_sql(sql))
    return str(tree.get("error_message") or "it is not a single expression")


def str_offsets(text: str) -> Callable[[int], int]:
    """From a position DuckDB gives in ``text`` (a UTF-8 byte offset) to the same position in
    the Python string (a code point offset)."""
    if text.isascii():
        return lambda position: position
    # The byte offset at which each character starts (and the end), ascending.
    starts = list(itertools.accumulate((len(c.encode("utf-8")) for c in text), initial=0))
    return lambda position: bisect.bisect_left(starts, position)


# The characters DuckDB's parser reads as blanks outside quotes and its tokenizer does not (it
# would take "t<no-break space>DESC" for one word). One for one, so positions stay put.
_UNICODE_BLANKS = str.maketrans(
    dict.fromkeys(
        "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
        "\u200a\u200b\u202f\u205f\u2060\u3000\ufeff",
        " ",
    )
)


@dataclass(frozen=True)
class Token:
    """One of DuckDB's tokens of a text, at Python string offsets."""

    start: int
    end: int  # where the next token starts (or the text ends): trailing blanks included
    kind: duckdb.token_type
    word: str  # the token's text, stripped and upper-cased (keywords compare this way)


def tokenize(text: str) -> list[Token]:
    """DuckDB's tokens of ``text``, as its parser sees them: its tokenizer knows quoting and
    comments, and Unicode blanks are blanks."""
    text = text.translate(_UNICODE_BLANKS)
    offset = str_offsets(text)
    found = [(offset(position), kind) for position, kind in duckdb.tokenize(text)]
    ends = [start for start, _ in found[1:]] + [len(text)]
    return [
        Token(start, end, kind, text[start:end].strip().upper())
        for (start, kind), end in zip(found, ends, strict=True)
    ]


def code_tokens(text: str) -> list[Token]:
    """The tokens of ``text`` that are not comments."""
    return [t for t in tokenize(text) if t.kind != duckdb.token_type.comment]


def _without_trailing_comments(text: str) -> str:
    """``text`` up to its last token that is not a comment: vane writes expressions into
    larger SQL (``(expr) AS name``), where a trailing ``-- note`` would swallow the rest."""
    code = code_tokens(text)
    return text[: code[-1].end].strip() if code else text.strip()


def source_span(text: str, node: dict[str, Any]) -> tuple[int, int]:
    """Where a parse-tree node of ``text`` was written, as Python string offsets."""
    offset = str_offsets(text)
    start = node["query_location"]
    return offset(start), offset(start + node["query_location_length"])


@dataclass(frozen=True)
class ParsedExpression:
    """One SQL expression as the user wrote it."""

    text: str  # the expression without its alias
    alias: str | None  # ``x + 1 AS y`` -> ``y``
    # The column names it reads (as written, compare them case-insensitively), or None when that
    # cannot be known from the text (``*``, ``COLUMNS(...)``, a subquery).
    columns: frozenset[str] | None
    # Whether each row's value depends on that row alone: not for window functions (``OVER``)
    # or aggregates, whose values depend on which other rows there are.
    row_local: bool = True
    # The functions it calls (lower case; operators such as ``+`` included).
    functions: frozenset[str] = frozenset()


def parse_expression(text: str) -> ParsedExpression:
    """Parse one select-list expression (``"price * qty AS total"``); a ``PlanError`` if the
    text is not exactly one expression."""
    check_text(text, "SQL expression")
    node = _parse_select(f"SELECT {text}")
    items = node.get("select_list", []) if node else []
    clean = (
        node is not None
        and len(items) == 1
        and node.get("from_table", {}).get("type") in (None, "EMPTY")
        and node.get("where_clause") is None
        and not node.get("modifiers")
        and not node.get("group_expressions")
    )
    if node is None:
        raise PlanError(f"{text!r} does not parse: {_parse_error(f'SELECT {text}')}")
    if not clean:
        raise PlanError(
            f"{text!r} is not one SQL expression. Pass one expression per argument, such as "
            "'price * qty AS total'"
        )
    item = items[0]
    alias = item.get("alias") or None
    code = _without_trailing_comments(text)
    body = _strip_alias(code, alias) if alias else code
    return ParsedExpression(body, alias, _columns_of(item), _row_local(item), _functions_of(item))


@dataclass(frozen=True)
class ParsedSortKey:
    text: str  # the key's expression, without ASC/DESC/NULLS FIRST/LAST
    descending: bool
    nulls_first: bool | None  # None: DuckDB's default (nulls last)


_ORDER_WORDS = frozenset({"ASC", "DESC", "NULLS", "FIRST", "LAST"})


def parse_sort_key(text: str) -> ParsedSortKey:
    """One ORDER BY key as written (``"score DESC NULLS FIRST"``), or a ``PlanError``."""
    check_text(text, "order_by()")
    node = _parse_select(f"SELECT * ORDER BY {text}")
    modifiers = node.get("modifiers", []) if node else []
    orders = [o for m in modifiers if m.get("type") == "ORDER_MODIFIER" for o in m["orders"]]
    if len(orders) != 1:
        raise PlanError(
            f"order_by(): {text!r} is not one sort key. Pass each key as its own argument, "
            "such as order_by('score DESC', 'id')"
        )
    text = _without_trailing_comments(text)
    cut = len(text)
    for token in reversed(code_tokens(text)):
        if token.kind != duckdb.token_type.keyword or token.word not in _ORDER_WORDS:
            break
        cut = token.start
    nulls = orders[0]["null_order"]
    return ParsedSortKey(
        text[:cut].strip(),
        orders[0]["type"] == "DESCENDING",
        None if nulls == "ORDER_DEFAULT" else nulls == "NULLS FIRST",
    )


def _row_local(tree: dict[str, Any]) -> bool:
    for node in walk_tree(tree):
        kind = node.get("class")
        if kind in ("WINDOW", "SUBQUERY"):
            return False
        if kind == "FUNCTION" and is_aggregate(node.get("function_name", "")):
            return False
    return True


@functools.lru_cache(maxsize=1)
def _aggregates() -> frozenset[str]:
    with _engine.scratch() as cursor:
        rows = cursor.sql(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
            "WHERE function_type = 'aggregate'"
        ).fetchall()
    return frozenset(name for (name,) in rows) | {"count_star"}


def _functions_of(tree: Any) -> frozenset[str]:
    return frozenset(
        node["function_name"].lower()
        for node in walk_tree(tree)
        if node.get("class") in ("FUNCTION", "WINDOW") and node.get("function_name")
    )


# Parameter types whose functions DuckDB calls consistent only within a query because they
# read the session's time zone or calendar (which a step's identity records), not the clock.
_ZONED = ("WITH TIME ZONE", "TIMESTAMPTZ", "TIMETZ")


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, list[tuple[str, str | None, list[str], list[str], str | None]]]:
    """DuckDB's functions by lower-case name: each overload's kind, stability, parameters,
    parameter types and (for a macro) definition."""
    with _engine.scratch() as cursor:
        rows = cursor.sql(
            "SELECT lower(function_name), function_type, stability, parameters, "
            "parameter_types, macro_definition FROM duckdb_functions()"
        ).fetchall()
    catalog: dict[str, list[tuple[str, str | None, list[str], list[str], str | None]]] = {}
    for name, kind, stability, parameters, types, definition in rows:
        catalog.setdefault(name, []).append(
            (kind, stability, list(parameters or ()), list(types or ()), definition)
        )
    return catalog


@functools.lru_cache(maxsize=1024)
def gives_one_row(function: str) -> bool:
    """Whether a call of ``function`` in a select list gives one value for each row: DuckDB's
    catalog lists a scalar overload of it, or it is a macro whose definition calls only such
    functions (``nullif``, ``date_add``). Not ``unnest`` (nor its alias ``unlist``), nor a
    macro over it (``generate_subscripts``), nor a name the catalog does not know."""
    return _one_row(function.lower(), frozenset())


_MANY_ROWS = frozenset({"unnest", "unlist"})


def _one_row(name: str, seen: frozenset[str]) -> bool:
    if name in _OPERATORS:
        return True
    overloads = _catalog().get(name)
    if not overloads or name in _MANY_ROWS or name in seen:
        return False
    if any(kind == "scalar" for kind, *_ in overloads):
        return True  # (in a select list the call is the scalar one: a table function is not)
    macros = [definition for kind, *_, definition in overloads if kind == "macro"]
    if not macros or None in macros:
        return False
    for definition in macros:
        node = _parse_select(f"SELECT {definition}")
        if node is None or any(p.get("class") == "SUBQUERY" for p in walk_tree(node)):
            return False
        if not all(_one_row(f, seen | {name}) for f in _functions_of(node)):
            return False
    return True


@functools.lru_cache(maxsize=1024)
def is_repeatable(function: str) -> bool:
    """Whether DuckDB's catalog says ``function`` gives the same value for the same arguments
    in every query, given the session's time zone and calendar: not for a volatile function
    (``random``, ``uuid``, ``nextval``), one that reads the clock (``now``, ``today``,
    ``age(ts)``) or the session (``current_setting``), nor for a macro that calls one
    (``ago``), nor for a name the catalog does not know (a user's macro). What a rerun of a
    resumable write needs to know to find a batch again by its place in the input."""
    return _repeatable(function.lower(), frozenset())


# Functions the catalog lists wrongly or not at all: ``age`` with one argument counts from
# today's date, though DuckDB lists that overload as consistent; ``coalesce`` is an operator to
# DuckDB's parser, so not in the catalog.
_CLOCK = frozenset({"age"})
_OPERATORS = frozenset({"coalesce"})


def _repeatable(name: str, seen: frozenset[str]) -> bool:
    if name in _CLOCK:
        return False
    if name in _OPERATORS:
        return True
    overloads = _catalog().get(name)
    if not overloads or name in seen:
        return False
    for kind, stability, parameters, types, definition in overloads:
        if stability == "VOLATILE":
            return False
        if stability == "CONSISTENT_WITHIN_QUERY" and not any(
            zoned in t for t in types for zoned in _ZONED
        ):
            return False  # the clock or the session, not only the time zone
        if stability is None:
            if kind != "macro" or definition is None:
                return False
            node = _parse_select(f"SELECT {definition}")
            if node is None:
                return False
            # A reference that is not one of its parameters is a keyword the binder resolves
            # (``current_timestamp``, ``current_date``): the clock.
            own = {p.lower() for p in parameters}
            for part in walk_tree(node):
                if (
                    part.get("class") == "COLUMN_REF"
                    and not {c.lower() for c in part["column_names"]} <= own
                ):
                    return False
                if part.get("class") in ("SUBQUERY", "STAR"):
                    return False
            if not all(_repeatable(f, seen | {name}) for f in _functions_of(node)):
                return False
    return True


def is_aggregate(function: str) -> bool:
    """Whether DuckDB's catalog says ``function`` aggregates rows."""
    return function.lower() in _aggregates()


def query_columns(text: str) -> frozenset[str] | None:
    """Every column name a whole query mentions, or None when unknown (``SELECT *``)."""
    check_text(text, "sql()")
    node = _parse_select(text)
    return None if node is None else _columns_of(node)


def _strip_alias(text: str, alias: str) -> str:
    """``text`` (with no trailing comment) without its trailing alias (``x + 1 AS y`` ->
    ``x + 1``), cut at the alias's own token so quoting and comments are DuckDB's business."""
    code = code_tokens(text)
    cut = code[-1].start  # the alias is the last token
    if len(code) >= 2 and code[-2].kind == duckdb.token_type.keyword and code[-2].word == "AS":
        cut = code[-2].start
    return text[:cut].strip()


def walk_tree(node: Any) -> Iterator[dict[str, Any]]:
    """Every object in a parse tree (as ``json_serialize_sql`` gives it), parents first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk_tree(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_tree(value)


def _columns_of(tree: dict[str, Any]) -> frozenset[str] | None:
    names: set[str] = set()
    for node in walk_tree(tree):
        kind = node.get("class")
        if kind in ("STAR", "SUBQUERY"):
            return None
        if kind == "LAMBDA":
            # A lambda's parameters look like column references; the body may also read real
            # columns, and telling them apart needs the binder: say "unknown".
            return None
        if kind == "COLUMN_REF":
            # ``s.field`` may be a table and a column or a column and a struct field: keep
            # every part, so the set is never smaller than the truth.
            names.update(node["column_names"])
    return frozenset(names)
