"""A server per node on Ray: one actor per node, pinned there, holding that node's GPUs.

Each actor runs a ``NodeServer`` (``node_server.py``): the same start, health check, restarts and
state file as on the local runner, with the node's address as ``{host}`` and the GPUs Ray gave
the actor as the server's ``CUDA_VISIBLE_DEVICES``. The actors are the driver's (not
detached): when the driver ends, Ray ends them, and each one's server ends with the thread that
started it (the parent-death signal, ``_server_process.py``).

Which nodes: the ``nodes`` chosen, else every live node with the GPUs asked for
(``gpus_per_actor``), or with a CPU when the server asks for no GPU.
"""

from __future__ import annotations

from typing import Any

from vane.ai.node_server import NodeEntry, NodeInfo, NodeServer, ServerSpec
from vane.errors import ConfigurationError, ServerError


class NodeServerActor:
    """Ray actor body: one ``NodeServer`` on the node it was pinned to."""

    def __init__(self, spec: ServerSpec, name: str, node: str) -> None:
        import ray

        self.spec = spec
        gpu_ids = [str(g) for g in ray.get_gpu_ids()] if spec.gpus else None
        host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.server = NodeServer(spec, node=node, host=host, gpu_ids=gpu_ids, name=name)

    def start(self) -> tuple[NodeEntry, NodeInfo] | str:
        """This node's server's address and description, or why it did not start (a string:
        the driver raises it, so every node's failure is seen, not Ray's wrapping of one)."""
        try:
            self.server.start()
        except ServerError as exc:
            return str(exc)
        gpus = tuple(self.server.gpu_ids) if self.server.gpu_ids is not None else None
        info = NodeInfo(
            self.server.node, self.server.host, self.server.port, gpus, self.server.shown_command
        )
        return self.server.entry, info

    def stop(self) -> str | None:
        self.server.stop()
        return self.server.failure

    def pid(self) -> int | None:
        return self.server.pid

    def restarts(self) -> int:
        return self.server.restarts


class RayServers:
    """The driver's side: start an actor per node, collect their addresses, stop them."""

    def __init__(self, spec: ServerSpec, name: str, nodes: tuple[str, ...] | None = None) -> None:
        self.spec = spec
        self.name = name
        self.nodes = nodes
        self.actors: dict[str, Any] = {}

    def _nodes(self) -> list[str]:
        import ray

        if not ray.is_initialized():  # vane.configure(runner="ray") connects; else here
            ray.init()
        alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        if self.nodes is not None:
            unknown = sorted(set(self.nodes) - {n["NodeID"] for n in alive})
            if unknown:
                raise ConfigurationError(
                    f"serve(nodes=...): no live Ray node has the id {unknown[0]!r}; the live "
                    f"nodes are {', '.join(sorted(n['NodeID'] for n in alive))}"
                )
            alive = [n for n in alive if n["NodeID"] in self.nodes]
        chosen = [
            node["NodeID"]
            for node in alive
            if (
                node["Resources"].get("GPU", 0) >= self.spec.gpus
                if self.spec.gpus
                else self.nodes is not None or node["Resources"].get("CPU", 0) > 0
            )
        ]
        if not chosen:
            what = f"{self.spec.gpus} GPUs" if self.spec.gpus else "a CPU"
            raise ConfigurationError(
                f"serve(): no node of the Ray cluster has {what} for a server; ask for fewer "
                "GPUs (gpus_per_actor=), or add nodes that have them"
            )
        return sorted(chosen)

    def start(self) -> tuple[tuple[NodeEntry, ...], tuple[NodeInfo, ...]]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(NodeServerActor)
        for node in self._nodes():
            self.actors[node] = remote.options(
                num_cpus=0,
                num_gpus=self.spec.gpus,
                max_concurrency=4,  # pid() and restarts() answer while start() waits
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(self.spec, self.name, node)
        started = ray.get([actor.start.remote() for actor in self.actors.values()])
        # (a failure raised here, Ctrl-C included, is stopped by Server.start)
        failures = [s for s in started if isinstance(s, str)]
        if failures:
            raise ServerError("\n".join(failures))
        entries = tuple(s[0] for s in started if not isinstance(s, str))
        infos = tuple(s[1] for s in started if not isinstance(s, str))
        return entries, infos

    def stop(self) -> str | None:
        """Stop every node's server and end its actor; the first node's failure, if any."""
        import ray

        failures: list[str | None] = []
        refs = [actor.stop.remote() for actor in self.actors.values()]  # all at once
        for ref, actor in zip(refs, self.actors.values(), strict=True):
            try:
                failures.append(ray.get(ref))
            except Exception:  # an actor that never started (or died) has no server to stop
                failures.append(None)
            ray.kill(actor)
        self.actors = {}
        return next((f for f in failures if f), None)

    def pids(self) -> dict[str, int]:
        import ray

        pids = ray.get([actor.pid.remote() for actor in self.actors.values()])
        return {node: pid for node, pid in zip(self.actors, pids, strict=True) if pid}

    def restarts(self) -> int:
        import ray

        return int(sum(ray.get([actor.restarts.remote() for actor in self.actors.values()])))
