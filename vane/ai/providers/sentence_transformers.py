"""sentence-transformers models for ``embed_text`` (and ``classify_text`` by similarity):
``SentenceTransformer.encode`` on each batch, on CUDA when the worker has one.

Options: ``device``, ``dimensions`` (truncate to the first n, for Matryoshka models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vane.ai.protocols import Usage
from vane.ai.providers._models import device, locate, read_json, source
from vane.ai.registry import require_packages

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True)
class SentenceTransformerEmbedder:
    provider: str
    model: str
    size: int | None = None
    device: str | None = None
    dimensions: int | None = None
    local_files_only: bool = False  # on this machine: never ask the hub (see _models.py)

    def instantiate(self) -> _Encoder:
        return _Encoder(self)

    def resources(self) -> Mapping[str, Any]:
        return {}


class _Encoder:
    def __init__(self, descriptor: SentenceTransformerEmbedder) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(
            source(descriptor.model),
            device=device(descriptor.device),
            truncate_dim=descriptor.dimensions,
            local_files_only=descriptor.local_files_only,
        )

    def embed_text(self, texts: Sequence[str], usage: Usage) -> Any:
        usage.requests += 1
        return self.model.encode(list(texts), batch_size=max(1, len(texts)), convert_to_numpy=True)


def _size(directory: Any, dimensions: int | None) -> int | None:
    """The vector size the model's files declare (its last Dense layer, else its pooling)."""
    size = read_json(directory, "2_Dense/config.json").get("out_features") or read_json(
        directory, "1_Pooling/config.json"
    ).get("word_embedding_dimension")
    if size and dimensions:
        return min(int(size), dimensions)
    return int(size) if size else dimensions


def text_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> SentenceTransformerEmbedder:
    require_packages(provider, {"sentence_transformers": "torch", "torch": "torch"})
    name = model or DEFAULT_MODEL
    directory = locate(provider, name)
    dimensions = options.get("dimensions")
    return SentenceTransformerEmbedder(
        provider,
        name,
        _size(directory, dimensions),
        options.get("device"),
        dimensions,
        local_files_only=directory is not None,
    )
