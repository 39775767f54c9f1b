"""The examples in README.md and docs/ run as written, and the pages point only to files that
are in the repository."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
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


# ---- references to the repository's files ---------------------------------------------------


def _tracked() -> set[str]:
    """The repository's files, as a clone has them (the files git tracks), and their folders."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:  # not a git checkout (an unpacked source archive): its files
        files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()}
    else:
        files = set(listed.stdout.splitlines())
    folders = {str(Path(f).parents[i]) for f in files for i in range(len(Path(f).parts) - 1)}
    return files | folders


TRACKED = _tracked()
FENCE = re.compile(r"```.*?```", re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FILE_LIKE = re.compile(r"\.?[\w-]+(?:/[\w.-]+)*/?")  # `docs/io.md`, `bench/`, `_engine.py`
REPO_PATH = re.compile(r"(?<![\w./])(?:docs|vane|tests|bench|examples)/[\w./-]*[\w/]")
SUFFIXES = (".py", ".md", ".toml", ".cfg", ".txt", ".sh")


def _exists(reference: str, page: Path) -> bool:
    """Whether a path a page names is in the repository: relative to the page or to the root,
    or the end of a path in it (`io/formats.py`, `ipc.py`, named after their folder); a
    module's attribute (`udf/column_calls.ColumnCalls`) by its module."""
    path = reference.split("#", maxsplit=1)[0].rstrip("/")
    if not path:
        return True  # a link within the page
    candidates = [path, os.path.normpath(page.parent.relative_to(ROOT) / path)]
    module = re.fullmatch(r"(.+)\.[A-Za-z_]\w*", path)
    if module and not path.endswith(SUFFIXES):
        candidates.append(f"{module[1]}.py")
    return any(c in TRACKED or any(t.endswith("/" + c) for t in TRACKED) for c in candidates)


def _references(text: str) -> Iterator[str]:
    prose = FENCE.sub("", text)
    for target in LINK.findall(CODE_SPAN.sub("", prose)):
        if not re.match(r"[a-z]+:", target):  # not https:, mailto:
            yield target
    for span in CODE_SPAN.findall(prose):
        if FILE_LIKE.fullmatch(span) and ("/" in span or span.endswith(SUFFIXES)):
            yield span
    yield from REPO_PATH.findall(text)  # also in plain text and in examples' comments


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_name_only_files_in_the_repository(page: Path) -> None:
    missing = sorted({r for r in _references(page.read_text()) if not _exists(r, page)})
    assert not missing, f"{page.name} names files that are not in the repository: {missing}"


def test_a_missing_file_is_found_in_links_code_and_text() -> None:
    text = (
        "See [the guide](guide.md), [io](io.md) and [Ray](https://ray.io), `vane/nope.py`,\n"
        "`io/formats.py`, `udf/column_calls.ColumnCalls` and docs/gone.md.\n"
        "```python\nrel.write_parquet('out/')  # see docs/ray.md and bench/nothing.py\n```\n"
    )
    page = ROOT / "docs" / "page.md"
    missing = sorted({r for r in _references(text) if not _exists(r, page)})
    assert missing == ["bench/nothing.py", "docs/gone.md", "guide.md", "vane/nope.py"]
