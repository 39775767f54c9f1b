"""Finding a local model when the plan is built: a directory, or a hub id already in the cache.

A model that cannot be found is an error then, not in a worker later, when downloading is off
(``HF_HUB_OFFLINE=1``). Reading its config files also tells an embedding's size, so the column
can be ``FLOAT[n]``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vane.errors import ConfigurationError


def locate(provider: str, model: str) -> Path | None:
    """The model's directory, or None if it is not on this machine and may be downloaded."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # huggingface_hub's "not in the cache" errors, or no huggingface_hub
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ConfigurationError(
            f"provider {provider!r}: model {model!r} is neither a directory nor in the Hugging "
            "Face cache, and HF_HUB_OFFLINE forbids downloading it. Pass the path of a model "
            "directory, or download the model first"
        )
    return None


def read_json(directory: Path | None, name: str) -> dict[str, Any]:
    if directory is None or not (directory / name).is_file():
        return {}
    loaded: dict[str, Any] = json.loads((directory / name).read_text())
    return loaded


def device(requested: str | None) -> str:
    """``requested``, else CUDA when this worker has a GPU, else the CPU."""
    if requested:
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
