"""Which runner executes a plan: chosen by ``vane.configure(runner=...)``."""

from __future__ import annotations

from vane.config import get_config
from vane.execution.local import LocalRunner

_LOCAL = LocalRunner()


def current_runner() -> LocalRunner:
    name = get_config().runner
    if name == "local":
        return _LOCAL
    raise AssertionError(f"configure() admitted an unknown runner {name!r}")
