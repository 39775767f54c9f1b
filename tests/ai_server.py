"""The tests' OpenAI-compatible server is vane's own (``vane.testing.OpenAIServer``), which
users can start for their tests too; this module keeps the tests' names for it."""

from __future__ import annotations

from vane.testing.server import Behaviour, OpenAIServer, Scripted, answer_for, vector_for

FakeServer = OpenAIServer

__all__ = ["Behaviour", "FakeServer", "Scripted", "answer_for", "vector_for"]
