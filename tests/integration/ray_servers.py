"""Driver for the two-node test of ``vane.ai.serve`` on Ray (run by test_servers.py in a
process of its own, so its cluster is its own): two nodes (the head and one more) with two CPUs
and one logical GPU each; a server per node, started as a command; a prompt step whose actors
send their requests to their own node's server; then the same job again, with one server
killed in the middle. Prints what each server counted, what the progress events said last of
each server in the first job, and the second job's usage, as JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

ROWS = 120


def main() -> None:
    out = Path(sys.argv[1])
    import ray
    from ray.cluster_utils import Cluster

    import vane
    import vane.ai
    from vane.observe.events import ServerRequests, subscribe

    node = {"num_cpus": 2, "num_gpus": 1}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:  # (a failed start too: the cluster's address file names no dead cluster)
        cluster.add_node(**node)
        ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
        vane.configure(runner="ray", progress=False)
        command = [
            sys.executable,
            "-m",
            "vane.testing.server",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--latency",
            "0.1",
        ]
        with vane.ai.serve(
            command, health="/health", gpus_per_actor=1, startup_timeout=120
        ) as server:
            rel = vane.range(ROWS).with_column("q", "'question ' || id")
            # Three actors on two nodes of two CPUs: both nodes hold one at least; two requests
            # in flight per actor make the job outlast the actors' starts, so that each is
            # likely to get work.
            rel = rel.prompt(
                "q",
                server=server,
                model="m",
                batch_size=10,
                concurrency=3,
                max_concurrent_requests=2,
            )
            # What the progress line said last of each node's server, from the tally
            shown: list[ServerRequests] = []
            stop_showing = subscribe(
                lambda e: shown.append(e) if isinstance(e, ServerRequests) else None
            )
            try:
                rel.write_parquet(out)
            finally:
                stop_showing()
            counted = {node: _stats(url) for node, url in server.urls.items()}
            # A server killed in the middle of a job: restarted on its node, the requests it
            # took down sent again there, every row answered once.
            stop = threading.Event()
            fired: list[tuple[int, int]] = []  # (the group killed, its requests in flight)
            groups = server.pids

            def kill_when_busy() -> None:  # whichever server has requests in flight first
                while not stop.wait(0.02):
                    for node, url in server.urls.items():
                        busy = _stats(url)["in_flight"]
                        if busy > 0:
                            os.killpg(groups[node], signal.SIGKILL)
                            fired.append((groups[node], busy))
                            return

            killer = threading.Thread(target=kill_when_busy)
            killer.start()
            second = rel.write_parquet(out.with_name("again"))
            stop.set()
            killer.join()
            summary = {
                "urls": server.urls,
                "groups": server.pids,
                "stats": counted,
                "nodes": [info.describe() for info in server.nodes],
                "restarts": server.restarts,
                "killed": fired[0][0] if fired else None,
                "in_flight_when_killed": fired[0][1] if fired else 0,
                "usage": next(iter(second.usage.values())),
                "progress": {
                    c.server: [c.in_flight, c.sent, c.retried]
                    for c in (shown[-1].servers if shown else ())
                },
            }
        print(json.dumps(summary), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats") as reply:
        stats: dict[str, Any] = json.loads(reply.read())
    return stats


if __name__ == "__main__":
    main()
