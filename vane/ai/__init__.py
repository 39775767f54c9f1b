"""AI functions: run an LLM or an embedding model over a column with one call.

``prompt``, ``embed_text``, ``embed_image``, ``classify_text`` and ``classify_image`` are
expressions (use them in ``select`` and ``with_column``, or attach them for SQL);
``Relation.prompt`` and friends add their column and keep the rest. Providers (``openai`` and
any OpenAI-compatible server, ``lm_studio``, ``ollama``, ``vllm``, ``transformers``,
``sentence_transformers``) load on first use. See docs/ai-functions.md. ``serve`` starts a
server per node that the functions send their requests to (``server=``); see
docs/servers.md.
"""

from __future__ import annotations

from vane.ai.functions import classify_image, classify_text, embed_image, embed_text, prompt
from vane.ai.protocols import Usage
from vane.ai.servers import Server, serve

__all__ = [
    "Server",
    "Usage",
    "classify_image",
    "classify_text",
    "embed_image",
    "embed_text",
    "prompt",
    "serve",
]
