"""Process-wide settings, changed with ``vane.configure``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from vane.errors import ConfigurationError

RUNNERS = ("local",)


@dataclass(frozen=True)
class Config:
    runner: str = "local"
    progress: bool = True
    # Rows per Arrow batch that vane reads from DuckDB wherever it streams: into a UDF stage (which
    # cuts them to the UDF's batch_size), into a sink, and out of iter_batches by default.
    # Measured: 1,024-row reads cost more than a no-op UDF's handoff; 65,536 amortizes that.
    batch_size: int = 65_536


_config = Config()


def get_config() -> Config:
    return _config


def configure(
    *, runner: str | None = None, progress: bool | None = None, batch_size: int | None = None
) -> Config:
    """Change process-wide settings; returns the settings now in force.

    >>> import vane
    >>> vane.configure(progress=False).progress
    False
    """
    global _config
    changes: dict[str, object] = {}
    if runner is not None:
        if runner not in RUNNERS:
            raise ConfigurationError(
                f"runner={runner!r} is not available; this version of vane has "
                f"{', '.join(map(repr, RUNNERS))}"
            )
        changes["runner"] = runner
    if progress is not None:
        changes["progress"] = bool(progress)
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}")
        changes["batch_size"] = batch_size
    _config = replace(_config, **changes)  # type: ignore[arg-type]
    return _config
