"""What the test server answers: its behaviour (latency, failures, scripted replies, the Batch
API's timing), the deterministic answers and vectors a test can work out for itself, and how
a request's messages are read (text, image and file parts)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Behaviour:
    latency: float = 0.0
    fail_every: int = 0  # every n-th request fails with fail_status (0: never)
    fail_status: int = 429
    retry_after: str | None = None
    stall_every: int = 0  # every n-th request waits stall_seconds before answering
    stall_seconds: float = 5.0
    malformed_every: int = 0  # every n-th reply is not JSON
    refuse: set[str] = field(default_factory=set)  # prompts answered with HTTP 400, always
    misfit: set[str] = field(default_factory=set)  # prompts whose structured answer misfits
    embedding_size: int = 8
    # prompt (or, for /embeddings, any text of the request) -> the reply to send instead
    scripted: dict[str, Scripted] = field(default_factory=dict)
    exit_after: int = 0  # the process exits (code 3) on request n+1, unanswered (0: never)
    hang_after: int = 0  # the server stops answering anything, health included, on request n+1
    # The Batch API: how many retrievals see a batch in progress before it ends; prompts whose
    # batch items fail (HTTP 500 in the error file); expiry with only the first n items answered.
    batch_polls: int = 1
    batch_fail: set[str] = field(default_factory=set)
    batch_expire_after: int | None = None
    batch_create_stall: bool = False  # a create, its batch made, replies once this is False
    batch_retrieve_status: int | None = None  # a batch's retrievals fail with this status
    batch_upload_status: int | None = None  # file uploads fail with this status
    hold: bool = False  # every API request waits, unanswered, until POST /release


@dataclass
class Scripted:
    """A reply sent as it is: ``body`` is JSON-encoded unless it is ``str`` or ``bytes`` (sent
    raw); ``times`` is how many requests get it before the prompt is answered as usual (None:
    every one)."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    times: int | None = None


def answer_for(prompt: str) -> str:
    return f"answer to: {prompt}"


def vector_for(text: str, size: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(size)]


def label_for_images(labels: list[Any], images: list[str]) -> Any:
    """The label a structured answer about ``images`` (their URLs or ``data:`` URIs) picks
    when its prompt names none: one of them, by the images' digest, as a test can work out."""
    digest = hashlib.sha256("".join(images).encode()).digest()
    return labels[int.from_bytes(digest[:4], "big") % len(labels)]


def message_text(content: Any) -> Any:
    """A message's text: a string, or a list of parts (``[{"type": "text", "text": ...}]``, as
    the OpenAI API allows and Daft's prompt sends)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content


def image_urls(content: Any) -> list[str]:
    """The URLs (``data:`` URIs included) of a message's ``image_url`` parts."""
    if not isinstance(content, list):
        return []
    return [
        str(p["image_url"]["url"])
        for p in content
        if isinstance(p, dict) and p.get("type") == "image_url"
    ]


def file_parts(content: Any) -> list[dict[str, Any]]:
    """The ``file`` objects of a message's file parts."""
    if not isinstance(content, list):
        return []
    return [p["file"] for p in content if isinstance(p, dict) and p.get("type") == "file"]


def fill(schema: dict[str, Any], prompt: str, images: list[str]) -> Any:
    """A value of the schema's shape that depends on the prompt (an enum picks the option the
    prompt mentions, or with images and none mentioned, ``label_for_images``'s)."""
    kind = schema.get("type")
    if "enum" in schema:
        mentioned = [v for v in schema["enum"] if str(v) in prompt]
        if not mentioned and images:
            return label_for_images(schema["enum"], images)
        return (mentioned or schema["enum"])[0]
    if kind == "object":
        return {name: fill(child, prompt, images) for name, child in schema["properties"].items()}
    if kind == "array":
        return [fill(schema.get("items", {}), prompt, images)]
    if kind == "integer":
        return len(prompt)
    if kind == "number":
        return len(prompt) / 2
    if kind == "boolean":
        return True
    return prompt
