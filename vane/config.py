"""Process-wide settings, changed with ``vane.configure``."""

from __future__ import annotations

import difflib
import os
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vane._arguments import checked
from vane._deps import require
from vane.errors import ArgumentError, ConfigurationError

RUNNERS = ("local", "ray")


def _default_memory_budget() -> int:
    """An eighth of this machine's memory, at most 2 GiB: what a materialized result (or a
    subplan two steps read) keeps in memory before it spills to disk."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 8 * 2**30
    return min(2 * 2**30, total // 8)


@dataclass(frozen=True)
class Config:
    runner: str = "local"
    progress: bool = True
    # Rows per Arrow batch that vane reads from DuckDB wherever it streams: into a UDF stage (which
    # cuts them to the UDF's batch_size), into a sink, and out of iter_batches by default.
    # Measured: 1,024-row reads cost more than a no-op UDF's handoff; 65,536 amortizes that.
    batch_size: int = 65_536
    memory_budget: int = _default_memory_budget()
    spill_directory: str | None = None  # None: the system's temporary directory
    ai_cache: str | None = None  # a directory where AI functions keep answers (None: none)
    # How long an action on Ray may wait, with nothing moving, for CPUs, GPUs or memory that
    # the cluster does not free, before it fails (math.inf: as long as it takes, e.g. while
    # an autoscaling cluster adds nodes). It shows the wait on the progress line first.
    resource_wait_timeout_s: float = 300.0
    # The bars model libraries draw in vane's workers (execution/model_bars.py): off unless asked.
    model_progress: bool = False
    # Options for remote filesystems (io/storage.py), flat or nested by protocol; a read_* or
    # write_* call's own storage_options go on top.
    storage_options: dict[str, Any] | None = None
    # How long a subprocess actor's worker process waits, idle, for the next action once one
    # ends (0: it exits with the action). Why 5 s: vane/execution/actors/warm.py.
    worker_idle_timeout_s: float = 5.0


_config = Config()

# What keeps idle workers (the local warm pool, Ray's kept hosts) registers here, to read
# ``worker_idle_timeout_s`` again as soon as it changes: a timeout set shorter, or to 0, ends
# what has waited longer now, not at the deadline the old timeout gave it. Held weakly: a
# registered object lives only as long as its owner keeps it.
_idle_timeout_watchers: list[weakref.WeakMethod[Callable[[], None]]] = []


def watch_idle_timeout(callback: Callable[[], None]) -> None:
    """Call ``callback`` (a bound method) whenever ``worker_idle_timeout_s`` changes."""
    _idle_timeout_watchers.append(weakref.WeakMethod(callback))


def _set(settings: Config) -> None:
    global _config
    changed = settings.worker_idle_timeout_s != _config.worker_idle_timeout_s
    _config = settings
    if changed:
        for ref in list(_idle_timeout_watchers):
            callback = ref()
            if callback is None:
                _idle_timeout_watchers.remove(ref)
            else:
                callback()


def get_config() -> Config:
    return _config


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return value


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(
            f"{name} must be a positive number of seconds (math.inf to wait as long as it "
            f"takes), got {value!r}"
        )
    return float(value)


SETTINGS = (
    "runner",
    "progress",
    "batch_size",
    "memory_budget",
    "spill_directory",
    "ai_cache",
    "resource_wait_timeout_s",
    "model_progress",
    "storage_options",
    "worker_idle_timeout_s",
)


@checked
def configure(
    *,
    runner: str | None = None,
    progress: bool | None = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    spill_directory: str | os.PathLike[str] | None = None,
    ai_cache: str | os.PathLike[str] | None = None,
    resource_wait_timeout_s: float | None = None,
    model_progress: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    worker_idle_timeout_s: float | None = None,
    address: str | None = None,
    **ray_init_kwargs: Any,
) -> Config:
    """Change process-wide settings; returns the settings now in force.

    ``memory_budget`` (bytes) is how much of a materialized result vane keeps in memory before
    it spills the result to Parquet files in ``spill_directory``. ``ai_cache`` is a directory
    where AI functions keep every answer they receive, so a rerun pays only for new requests.
    ``model_progress=True`` lets model libraries draw their progress bars in vane's workers
    (transformers' "Loading weights", downloads from the hub), which are off by default: vane's
    own progress line says how the job goes. ``HF_HUB_DISABLE_PROGRESS_BARS``, when set, is
    followed as set. ``storage_options`` reach every remote path (``s3://``...) vane reads
    or writes, spelled as pandas and fsspec spell them (``{"key": ..., "secret": ...,
    "endpoint_url": ...}``), or nested by protocol (``{"s3": {...}, "hf": {...}}``); a call's
    own ``storage_options=`` go on top (docs/io.md, "Where your data lives").
    ``worker_idle_timeout_s`` (default 5) is how long the worker processes of
    ``execution_backend="subprocess_actor"``, and on the Ray runner a step's actors, stay after
    an action, idle, for the next one to use instead of starting its own (the processes only:
    each action constructs its UDF anew); 0 ends them with the action. A change applies at
    once: those idle longer than the new timeout end now.

    ``runner="ray"`` runs every later action on Ray (see docs/ray.md): on the cluster this
    process is already connected to, else the one at ``address`` (``"auto"``, ``"ray://..."``),
    else a new local one; other keyword arguments go to ``ray.init``. ``runner="local"``
    switches back. Call it before building the pipeline: steps are checked against the
    runner's resources when they are built.

    >>> import vane
    >>> vane.configure(progress=False).progress
    False
    """
    for key in ray_init_kwargs:  # ray.init's own options pass through; a misspelled setting not
        close = difflib.get_close_matches(key, SETTINGS, n=1, cutoff=0.75)
        if close:
            raise ArgumentError(
                f"configure(): it takes no argument {key!r} (did you mean {close[0]!r}?). "
                f"It takes ({', '.join(SETTINGS)}, and ray.init's options with runner='ray')"
            )
    changes: dict[str, object] = {}
    if runner is not None:
        if runner not in RUNNERS:
            raise ConfigurationError(
                f"runner={runner!r} is not available; this version of vane has "
                f"{', '.join(map(repr, RUNNERS))}"
            )
        changes["runner"] = runner
    if (address is not None or ray_init_kwargs) and runner != "ray":
        given = ", ".join(sorted([*ray_init_kwargs, *(["address"] if address else [])]))
        raise ConfigurationError(
            f"configure() got {given}, which only apply with runner='ray' (they are passed to "
            f"ray.init); the other settings are {', '.join(SETTINGS)}"
        )
    if runner == "ray":
        require("ray", extra="ray")  # vane.session connects once the settings are recorded
    if progress is not None:
        changes["progress"] = bool(progress)
    if batch_size is not None:
        changes["batch_size"] = _positive("batch_size", batch_size)
    if memory_budget is not None:
        changes["memory_budget"] = _positive("memory_budget", memory_budget)
    if spill_directory is not None:
        directory = os.fspath(spill_directory)
        if not os.path.isdir(directory):
            raise ConfigurationError(
                f"spill_directory={directory!r} is not an existing directory; create it first"
            )
        changes["spill_directory"] = directory
    if ai_cache is not None:
        changes["ai_cache"] = os.fspath(ai_cache)
    if resource_wait_timeout_s is not None:
        changes["resource_wait_timeout_s"] = _seconds(
            "resource_wait_timeout_s", resource_wait_timeout_s
        )
    if model_progress is not None:
        changes["model_progress"] = bool(model_progress)
    if storage_options is not None:
        if not isinstance(storage_options, Mapping):
            raise ConfigurationError(
                f"storage_options takes a dict, got {type(storage_options).__name__}"
            )
        changes["storage_options"] = dict(storage_options)
    if worker_idle_timeout_s is not None:
        value = worker_idle_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigurationError(
                "worker_idle_timeout_s must be a number of seconds, 0 or more (0: worker "
                f"processes end with their action), got {value!r}"
            )
        changes["worker_idle_timeout_s"] = float(value)
    _set(replace(_config, **changes))  # type: ignore[arg-type]
    return _config


def restore(settings: Config) -> None:
    """Put back settings that ``get_config`` returned (a ``configure`` that failed)."""
    _set(settings)
