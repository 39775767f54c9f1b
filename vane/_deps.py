"""Optional dependencies, imported only when a feature needs them."""

from __future__ import annotations

import importlib
from types import ModuleType

from vane.errors import MissingDependencyError


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module``, or explain which extra of vane-data installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"this needs the package {module!r}, which is not installed. "
            f"Install it with: pip install 'vane-data[{extra}]'"
        ) from exc
