"""Connecting to Ray, and what the cluster offers.

vane uses the cluster this process is connected to (``ray.is_initialized()``), else connects to
``address``, else does as ``ray.init()`` does (``RAY_ADDRESS``, the cluster ``ray start`` started
here, else a new local one). Ray Data keeps rows in order (``preserve_order``) and draws
no progress bars of its own: vane reports progress itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vane._deps import require
from vane.errors import ConfigurationError


def ray_module() -> Any:
    return require("ray", extra="ray")


def connect(address: str | None, init_kwargs: Mapping[str, Any]) -> None:
    ray = ray_module()
    require("ray.data", extra="ray")
    if not ray.is_initialized():
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "configure_logging": True,
        }
        options.update(init_kwargs)
        # a cluster of its own: no address, or "local" (here or in RAY_ADDRESS, as ray.init reads)
        starts = (address or os.environ.get("RAY_ADDRESS") or "local") == "local"
        try:
            with _token_notice_quiet(starts):
                ray.init(address=address, **options)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = f"the Ray cluster at {address!r}" if address else "a local Ray cluster"
            raise ConfigurationError(
                f"configure(runner='ray') could not connect to {where}: {exc}. Start one with "
                "`ray start --head` and pass its address, or pass address='local' to start one here"
            ) from exc
    elif address is not None or init_kwargs:
        raise ConfigurationError(
            "configure(runner='ray'): this process is already connected to a Ray cluster, so "
            "address and ray.init arguments cannot apply; call ray.shutdown() first to connect "
            "elsewhere, or leave them out to use the current cluster"
        )
    tune_data_context()


@contextmanager
def _token_notice_quiet(starts: bool) -> Iterator[None]:
    """A cluster ``ray.init`` starts says, as it starts, that it enabled token authentication:
    Ray's default for a local cluster, nothing to act on, and a warning on every run of a
    cluster that vane starts for this process alone. A cluster of the user's says what it says."""
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    if starts:
        notice.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notice.setLevel(level)


def tune_data_context() -> None:
    from ray.data import DataContext

    context = DataContext.get_current()
    context.execution_options.preserve_order = True  # rows come back in input order
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    # An actor's failure reaches the driver as vane encoded it, not as Ray's generic wrapper.
    context.raise_original_map_exception = True
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # It would warn, once, that the progress bars vane turned off are off.
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Cluster:
    """What the Ray cluster has (CPU, GPU, memory, as Ray counts them): in all, and on each
    alive node."""

    total: Mapping[str, float]
    nodes: Sequence[Mapping[str, float]] = ()
    # The driver's node (where steps that keep state on the driver's disk run their actors),
    # if it is one of the cluster's.
    driver: Mapping[str, float] | None = None


def cluster_state() -> Cluster:
    ray = ray_module()
    if not ray.is_initialized():
        raise ConfigurationError(
            "the Ray runner is selected but this process is not connected to Ray (was "
            "ray.shutdown() called?). Call vane.configure(runner='ray') again"
        )
    alive = [node for node in ray.nodes() if node.get("Alive")]
    here = ray.get_runtime_context().get_node_id()
    driver = next((node["Resources"] for node in alive if node.get("NodeID") == here), None)
    return Cluster(ray.cluster_resources(), [node["Resources"] for node in alive], driver)
