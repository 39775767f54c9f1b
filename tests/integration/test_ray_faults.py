"""A node lost in the middle of a job: Ray restarts its actors elsewhere and runs their batches
again; the job completes and every row is written exactly once (writes commit at the end)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[2]


def _drive(out: Path, *mode: str) -> str:
    """Run tests/integration/ray_node_loss.py writing to ``out``; its output."""
    pytest.importorskip("ray")
    driver = subprocess.run(
        [sys.executable, "-m", "tests.integration.ray_node_loss", str(out), *mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert driver.returncode == 0, driver.stdout + driver.stderr
    assert "killed node" in driver.stdout
    assert "wrote 600 rows" in driver.stdout
    return driver.stdout


def test_a_node_lost_mid_job_loses_and_duplicates_no_rows(tmp_path):
    out = tmp_path / "out"
    _drive(out)
    table = pq.read_table(out)
    assert sorted(table["id"].to_pylist()) == list(range(600))  # every row, once
    assert len(set(table["node"].to_pylist())) >= 1


def test_a_kept_host_lost_with_its_node_serves_the_next_action(tmp_path):
    # Ray restarts the host on the node that is left, empty: the next action's step takes it
    # from the register, opens it, and its UDF runs there (vane/execution/ray/parked.py)
    out = tmp_path / "out"
    _drive(out, "kept")
    assert sorted(pq.read_table(out)["id"].to_pylist()) == list(range(600))
