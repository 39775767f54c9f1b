"""The examples in README.md and docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def examples():
    for page in PAGES:
        for number, block in enumerate(BLOCK.findall(page.read_text()), start=1):
            yield pytest.param(block, id=f"{page.name}-{number}")


@pytest.mark.parametrize("code", list(examples()))
def test_example_runs(code, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    if 'runner="ray"' in code:
        # the session's Ray cluster (4 logical GPUs), which configure(runner="ray") then uses
        request.getfixturevalue("ray_cluster")
    try:
        exec(compile(code, "<docs example>", "exec"), {"__name__": "__docs__"})
    finally:
        import vane

        vane.configure(runner="local")
