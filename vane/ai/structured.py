"""Structured output: ``return_format`` (a pydantic model class or a JSON schema) becomes the
schema sent with each request, the STRUCT type of the column, and a check of each answer.

An answer that is not text, is not JSON, does not fit the schema, or holds a value its column
cannot store (an integer past 64 bits, say) is that row's failure: it follows ``on_error`` for
that row only, and is never cached.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from vane.errors import ConfigurationError

_INT64 = (-(2**63), 2**63 - 1)

_SCALARS = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
}


@dataclass(frozen=True)
class OutputFormat:
    name: str
    schema: dict[str, Any]  # the JSON schema, in the strict form OpenAI's structured outputs take
    arrow_type: pa.DataType
    model: Any = None  # a pydantic model class, when one was given

    def parse(self, text: str) -> dict[str, Any]:
        """The answer as a dict of the schema's fields, or ``ValueError`` saying why not."""
        if self.model is not None:
            try:
                parsed = self.model.model_validate_json(text)
            except Exception as exc:  # pydantic's ValidationError, without importing pydantic
                raise ValueError(
                    f"the answer does not fit {self.name}: {_first_line(exc)}"
                ) from None
            value: dict[str, Any] = parsed.model_dump(mode="json")
            return value
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the answer is not JSON ({exc.msg}): {text[:80]!r}") from None
        _check(value, self.schema, self.schema, "answer")
        return value

    def read(self, text: str) -> pa.Array:
        """The answer as one row of the column's STRUCT type, or ``ValueError`` saying why it
        does not fit."""
        value = self.parse(text)
        try:
            row = pa.array([value], type=self.arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"the answer does not fit {self.name}: {_first_line(exc)}: {text[:80]!r}"
            ) from None
        # Arrow converts some values it should refuse (1.5 into an integer column becomes 1):
        # a row that does not read back as the answer was is a misfit, not a quiet change.
        if not _same(row.to_pylist()[0], value):
            raise ValueError(
                f"the answer does not fit {self.name}: its column would hold "
                f"{_shown(row.to_pylist()[0])}, not {text[:80]!r}"
            )
        return row


def read_answer(output: Any, form: OutputFormat | None) -> Any:
    """A model's output as a row's value: its text, or for ``return_format`` one row of the
    STRUCT column; ``ValueError`` when it is no answer (not text, or a misfit)."""
    if not isinstance(output, str):
        raise ValueError(f"the answer is not text: {_shown(output)}")
    return output if form is None else form.read(output)


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def output_format(return_format: Any) -> OutputFormat:
    """A pydantic model class or a JSON schema dict, read into an ``OutputFormat``."""
    model = None
    if isinstance(return_format, dict):
        schema = return_format
        name = str(schema.get("title", "answer"))
    elif hasattr(return_format, "model_json_schema"):
        model = return_format
        schema = return_format.model_json_schema()
        name = return_format.__name__
    else:
        raise ConfigurationError(
            "return_format must be a pydantic model class or a JSON schema (a dict with "
            f"'type': 'object' and 'properties'), got {return_format!r}"
        )
    if schema.get("type") != "object" or "properties" not in schema:
        raise ConfigurationError(
            f"return_format {name!r}: the schema must describe an object with properties"
        )
    return OutputFormat(name, _strict(schema), _arrow(schema, schema, name), model)


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        target: Any = root
        for part in path:
            target = target[part]
        node = target
    return node


def _arrow(node: dict[str, Any], root: dict[str, Any], where: str) -> pa.DataType:
    node = _resolve(node, root)
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        kinds = [o for o in options if _resolve(o, root).get("type") != "null"]
        if len(kinds) == 1:
            return _arrow(kinds[0], root, where)
        raise ConfigurationError(f"return_format: {where} may be several types; use one")
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if "enum" in node and kind is None:
        kind = "string"
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return pa.list_(_arrow(node.get("items", {}), root, f"{where}[]"))
    if kind == "object":
        properties = node.get("properties", {})
        return pa.struct(
            [pa.field(n, _arrow(p, root, f"{where}.{n}")) for n, p in properties.items()]
        )
    raise ConfigurationError(f"return_format: cannot store {where} of type {kind!r}")


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's strict mode wants every object closed and every property required."""
    strict = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(strict)
    return strict


def _check(value: Any, node: dict[str, Any], root: dict[str, Any], where: str) -> None:
    node = _resolve(node, root)
    kind = node.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise ValueError(f"{where} should be an object, got {_shown(value)}")
        missing = [n for n in node.get("required", ()) if n not in value]
        if missing:
            raise ValueError(f"{where} lacks {missing}")
        properties = node.get("properties", {})
        extra = [n for n in value if n not in properties]
        if extra and node.get("additionalProperties") is False:
            raise ValueError(f"{where} has fields the schema does not: {extra}")
        for name, child in properties.items():
            if name in value and value[name] is not None:
                _check(value[name], child, root, f"{where}.{name}")
    elif kind == "array":
        if not isinstance(value, list):
            raise ValueError(f"{where} should be a list, got {_shown(value)}")
        items = node.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                if item is not None:
                    _check(item, items, root, f"{where}[{index}]")
    elif kind == "integer" and not _is_integer(value):
        raise ValueError(f"{where} should be a 64-bit integer, got {_shown(value)}")
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{where} should be a number, got {_shown(value)}")
    elif kind == "string" and not isinstance(value, str):
        raise ValueError(f"{where} should be text, got {_shown(value)}")
    elif kind == "boolean" and not isinstance(value, bool):
        raise ValueError(f"{where} should be true or false, got {_shown(value)}")
    if "enum" in node and value not in node["enum"]:
        raise ValueError(f"{where} is {value!r}, not one of {node['enum']}")


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return False
        value = int(value)
    return isinstance(value, int) and _INT64[0] <= value <= _INT64[1]


def _same(stored: Any, given: Any) -> bool:
    """Whether a value read back from Arrow is the value given (NaN is NaN; True is not 1)."""
    if isinstance(stored, dict) and isinstance(given, dict):
        return stored.keys() == given.keys() and all(_same(stored[k], given[k]) for k in stored)
    if isinstance(stored, list) and isinstance(given, list):
        return len(stored) == len(given) and all(map(_same, stored, given))
    if isinstance(stored, bool) or isinstance(given, bool):
        return type(stored) is type(given) and stored == given
    if isinstance(stored, float) and isinstance(given, float) and math.isnan(stored):
        return math.isnan(given)
    return bool(stored == given)


def _shown(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)[:80]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too deep to show"
