"""Reading an OpenAI-compatible server's replies: field by field, trusting nothing. A reply
without a text answer, a vector of the wrong size or a ``usage`` that is not a count fails its
row only, or is taken as not reported."""

from __future__ import annotations

import json
import math
from typing import Any

from vane.ai.protocols import Answer


def shown(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)[:120]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too deep to show"


def chat_text(reply: Any) -> Any:
    """The answer in a chat completion: ``choices[0].message.content``, as it is (the caller's
    ``read`` decides whether it is text), or ``ValueError`` saying why the reply holds none."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"the reply has no choices: {shown(reply)}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError(f"the reply's choices[0] has no message: {shown(choice)}")
    content = message.get("content")
    if content is not None:
        return content
    refusal = message.get("refusal")
    if refusal:
        raise ValueError(f"the model refused to answer: {shown(refusal)}")
    if message.get("tool_calls") or message.get("function_call"):
        raise ValueError(
            "the model called a tool instead of answering (prompt() asks for text; drop the "
            "tools from the request)"
        )
    finish = choice.get("finish_reason")
    raise ValueError(f"the reply holds no answer (content is null; finish_reason {finish!r})")


_MAX_COUNT = 2**53  # past this a "count" is no count of tokens


def count(value: Any) -> int:
    """A token count as a server reported it; anything that is not a count is 0 (not
    reported), never a failure of an answer that came."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < _MAX_COUNT else 0


def tokens(reply: Any) -> tuple[int, int]:
    counts = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(counts, dict):
        return 0, 0
    return count(counts.get("prompt_tokens")), count(counts.get("completion_tokens"))


def vectors(reply: Any, texts: int, dimensions: int | None) -> list[Answer]:
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list):
        raise ValueError(f"the reply has no data: {shown(reply)}")
    if len(data) != texts:
        raise ValueError(f"the reply holds {len(data)} embeddings for {texts} texts")
    indexes = [item.get("index") if isinstance(item, dict) else None for item in data]
    if any(i is not None for i in indexes):  # in any order, each text's once
        by_index = dict(zip(indexes, data, strict=True))
        if (
            len(by_index) != texts
            or any(type(i) is not int or i not in by_index for i in range(texts))
            or any(type(i) is not int for i in indexes)
        ):
            raise ValueError(f"the reply's indexes are not 0..{texts - 1}: {shown(indexes[:10])}")
        data = [by_index[i] for i in range(texts)]
    return [vector(item, dimensions) for item in data]


def vector(item: Any, dimensions: int | None) -> Answer:
    vector = item.get("embedding") if isinstance(item, dict) else None
    if not isinstance(vector, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector
    ):
        return Answer(error=f"the reply holds no embedding for this text: {shown(item)}")
    if dimensions is not None and len(vector) != dimensions:
        return Answer(
            error=f"the reply's embedding has {len(vector)} numbers, not dimensions={dimensions}"
        )
    if not vector:
        return Answer(error="the reply's embedding is empty")
    return Answer(vector)
