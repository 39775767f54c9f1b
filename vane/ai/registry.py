"""Providers by name, loaded on first use.

Each provider is a module under ``vane.ai.providers`` with a function per task it offers
(``prompter``, ``text_embedder``, ``image_embedder``) that takes a model name and options and
returns a descriptor. ``lm_studio`` and ``ollama`` are the OpenAI-compatible provider with their
usual local address.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from vane.errors import ConfigurationError, MissingDependencyError

# name -> (module, options it implies)
PROVIDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("vane.ai.providers.openai", {}),
    "lm_studio": (
        "vane.ai.providers.openai",
        {"base_url": "http://127.0.0.1:1234/v1", "api_key": "lm-studio"},
    ),
    "ollama": (
        "vane.ai.providers.openai",
        {"base_url": "http://127.0.0.1:11434/v1", "api_key": "ollama"},
    ),
    "vllm": ("vane.ai.providers.vllm", {}),
    "transformers": ("vane.ai.providers.transformers", {}),
    "sentence_transformers": ("vane.ai.providers.sentence_transformers", {}),
}
TASKS = {
    "prompt": "prompter",
    "embed_text": "text_embedder",
    "embed_image": "image_embedder",
}


def require_packages(provider: str, packages: dict[str, str]) -> None:
    """Fail when the plan is built if a package the provider needs is not installed, naming
    the extra that installs it (``find_spec`` checks without importing it)."""
    for module, extra in packages.items():
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"provider {provider!r} needs the package {module!r}, which is not installed. "
                f"Install it with: pip install 'vane-data[{extra}]'"
            )


def descriptor(task: str, provider: str, model: str | None, options: Mapping[str, Any]) -> Any:
    """The descriptor for ``task`` from ``provider``, checked now."""
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown provider {provider!r}; the providers are {', '.join(sorted(PROVIDERS))}"
        )
    module_name, implied = PROVIDERS[provider]
    module = importlib.import_module(module_name)
    build = getattr(module, TASKS[task], None)
    if build is None:
        able = [
            name
            for name, (path, _) in sorted(PROVIDERS.items())
            if hasattr(importlib.import_module(path), TASKS[task])
        ]
        raise ConfigurationError(
            f"provider {provider!r} does not do {task}; the providers that do are {', '.join(able)}"
        )
    return build(provider, model, {**implied, **dict(options)})
