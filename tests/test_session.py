"""A test session leaves nothing in the temporary folder: the offline model-hub cache that
tests/conftest.py lays out is removed when the session ends, whether its tests pass or fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _session(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    """Run pytest with a temporary folder of its own; its status and what it left there."""
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    env.pop("HF_HOME")  # the inner session makes its own
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, sorted(p.name for p in temp.iterdir())


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_a_session_removes_its_model_cache(tmp_path, outcome):
    if outcome == "passed":
        status, left = _session(tmp_path, "tests/unit/test_display.py::test_cells")
    else:
        # A failing test, run with the suite's conftest as a plugin (the file is outside it).
        failing = tmp_path / "test_fails.py"
        failing.write_text("def test_fails():\n    assert False\n")
        status, left = _session(tmp_path, "-p", "tests.conftest", str(failing))
    assert status == (0 if outcome == "passed" else 1)
    assert not [name for name in left if name.startswith("vane-tests-hf-")]
