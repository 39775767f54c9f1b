"""The driver of test_ray_faults, run in a process of its own: a three-node Ray cluster on this
machine (``ray.cluster_utils.Cluster``: a head that runs no work, two workers), a pipeline whose
UDF marks the node it runs on, and, a few batches in, one worker node killed (its raylet and
every worker process on it, without grace). Prints the WriteResult.
Run: ``python -m tests.integration.ray_node_loss OUT``.

``OUT kept``: the node is killed between two actions instead, while it holds a host the first
action kept (vane/execution/ray/parked.py); the second action, which takes that host, writes."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa

ROWS = 600


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


class SlowTagger:
    """Tags each row with the node that answered it, slowly enough to be interrupted. It runs
    in a worker process of a Ray actor, which a node's raylet started: the raylet's pid names
    the node."""

    def __init__(self, markers: str) -> None:
        self.node = str(_parent(os.getppid()))
        self.markers = Path(markers)

    def __call__(self, batch: pa.Table) -> pa.Table:
        (self.markers / self.node).touch()
        time.sleep(0.2)
        return pa.table({"id": batch["id"], "node": [self.node] * batch.num_rows})


def main() -> None:
    out = Path(sys.argv[1])
    kept = sys.argv[2:] == ["kept"]
    markers = out.parent / "markers"
    markers.mkdir()
    import ray
    from ray.cluster_utils import Cluster

    import vane

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        # each worker node can hold both actors and still run the reading and writing tasks
        workers = [cluster.add_node(num_cpus=3) for _ in range(2)]
        ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
        vane.configure(runner="ray", progress=False, worker_idle_timeout_s=600)
        rel = vane.range(ROWS).map_batches(
            SlowTagger,
            schema={"id": "BIGINT", "node": "VARCHAR"},
            batch_size=10,
            concurrency=2,
            fn_constructor_args=(str(markers),),
        )
        if kept:
            before = _kill_a_kept_host(cluster, workers, rel, markers)
            print(rel.write_parquet(out), flush=True)
            # the same two actors served it (Ray restarts an actor under its own id) and were
            # kept again: none was replaced by a new one
            assert _kept_ids() == before, (_kept_ids(), before)
            return
        result: list[object] = []

        def run() -> None:
            try:
                result.append(rel.write_parquet(out))
            except BaseException as exc:  # shown by the test when it fails
                result.append(exc)
                raise

        job = threading.Thread(target=run)
        job.start()
        deadline = time.monotonic() + 120
        while not any(markers.iterdir()):
            assert time.monotonic() < deadline, "the UDF never ran"
            time.sleep(0.1)
        time.sleep(1.0)  # a few batches in
        busy = next(markers.iterdir()).name
        victim = next(node for node in workers if str(_raylet(node)) == busy)
        cluster.remove_node(victim, allow_graceful=False)
        print(f"killed node {busy}", flush=True)
        job.join(240)
        assert not job.is_alive(), "the job did not finish after the node was lost"
        if isinstance(result[0], BaseException):
            raise result[0]
        print(result[0], flush=True)
    finally:  # a failed run too: the cluster's address file names no dead cluster
        ray.shutdown()
        cluster.shutdown()


def _kept_ids() -> set[str]:
    from vane.execution.ray.parked import PARKED

    return {kept.handle._actor_id.hex() for kept in PARKED._entries}


def _kill_a_kept_host(
    cluster: object, workers: list[object], rel: object, markers: Path
) -> set[str]:
    """A first action, whose step's hosts are kept; then a node one of them is on, killed.
    The kept hosts' actor ids."""
    assert rel.count() == ROWS  # type: ignore[attr-defined]
    kept = _kept_ids()
    assert len(kept) == 2, kept
    busy = next(markers.iterdir()).name  # a node a kept host answered on
    victim = next(node for node in workers if str(_raylet(node)) == busy)
    cluster.remove_node(victim, allow_graceful=False)  # type: ignore[attr-defined]
    print(f"killed node {busy}", flush=True)
    return kept


def _raylet(node: object) -> int:
    from ray._private import ray_constants

    pid: int = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid  # type: ignore[attr-defined]
    return pid


if __name__ == "__main__":
    main()
