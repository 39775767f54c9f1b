"""The examples in README.md and docs/ run as a user runs them, and the pages point only to
files that are in the repository.

Each example is pasted into a file in an empty folder outside the repository and run there by
a Python of its own: with vane importable as an installed vane is (the package this session
imports, and nothing else of the repository: no ``tests``, no fixtures), an empty model-hub
cache, and no network (``HF_HUB_OFFLINE``, as every test here). Examples run two at a time.

Examples that need what a user does not have are marked known-failing (strict: once they run,
the mark has to go), each with the output that says why; failing any other way is a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import vane

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
TIMEOUT_S = 240  # a guard against an example that hangs, not a measure of one that runs


@dataclass(frozen=True)
class Known:
    """Why an example cannot run where a user pastes it, and what its output says then."""

    why: str
    says: str  # a regular expression
    timeout_s: float = TIMEOUT_S


KNOWN_FAILING: dict[str, Known] = {}


@dataclass(frozen=True)
class Example:
    page: str
    number: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}-{self.number}"

    @property
    def uses_ray(self) -> bool:
        return 'runner="ray"' in self.code


def _examples() -> Iterator[Example]:
    for page in PAGES:
        for number, code in enumerate(BLOCK.findall(page.read_text()), start=1):
            yield Example(page.name, number, code)


EXAMPLES = list(_examples())


class ExampleFailed(Exception):
    """The example exited with an error (or never finished)."""


def _params() -> Iterator[object]:
    for example in EXAMPLES:
        marks = []
        if example.id in KNOWN_FAILING:
            why = KNOWN_FAILING[example.id].why
            marks.append(pytest.mark.xfail(reason=why, raises=ExampleFailed, strict=True))
        yield pytest.param(example, id=example.id, marks=marks)


@dataclass(frozen=True)
class Outcome:
    status: int  # negative: ended by that signal (-9: killed when it did not finish)
    output: str


class Runs:
    """The session's example runs, all started when the first is asked for."""

    def __init__(self, folder: Path, examples: list[Example]) -> None:
        self.folder = folder
        site = folder / "site-packages"
        site.mkdir()
        # vane as installed, and nothing else of the repository: the package this session
        # imports (this checkout's), by a link, so `tests` cannot be imported.
        (site / "vane").symlink_to(Path(vane.__file__).resolve().parent)
        (folder / "hf-home").mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_"))}
        self.env.update(
            PYTHONPATH=str(site),
            HF_HOME=str(folder / "hf-home"),  # empty: a user's fresh cache
            HF_HUB_OFFLINE="1",  # nothing may come from a hub in tests
            TRANSFORMERS_OFFLINE="1",
        )
        # Two lanes: the Ray examples (each starts a cluster of its own: one at a time) and
        # the others, which together take about as long.
        self.lanes = {ray: ThreadPoolExecutor(max_workers=1) for ray in (True, False)}
        self.runs: dict[str, Future[Outcome]] = {
            e.id: self.lanes[e.uses_ray].submit(self._run, e) for e in examples
        }

    def _run(self, example: Example) -> Outcome:
        where = self.folder / example.id
        where.mkdir()
        (where / "example.py").write_text(example.code)
        process = subprocess.Popen(
            [sys.executable, "example.py"],
            cwd=where,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: a hung example goes with its children
        )
        known = KNOWN_FAILING.get(example.id)
        timeout = known.timeout_s if known else TIMEOUT_S
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_session(process.pid)
            output, _ = process.communicate()
            output += f"\n[did not finish in {timeout:g} s]"
        (where / "output.txt").write_text(output)  # kept with the session's temporary files
        return Outcome(process.wait(), output)

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.shutdown(wait=True, cancel_futures=True)


def _end_session(leader: int) -> None:
    """Kill the hung example and every process it started. They all share its session; Ray's
    workers put themselves in process groups of their own, so its group is not enough."""
    members = {leader}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == leader:  # state, parent, group, session
            members.add(int(stat.parent.name))
    for pid in members:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    chosen = {
        item.callspec.params["example"].id
        for item in request.session.items
        if item.originalname == "test_example_runs"
    }
    started = Runs(tmp_path_factory.mktemp("docs"), [e for e in EXAMPLES if e.id in chosen])
    yield started
    started.close()


@pytest.mark.parametrize("example", list(_params()))
def test_example_runs(example: Example, runs: Runs) -> None:
    outcome = runs.runs[example.id].result()
    if outcome.status == 0:
        return
    report = f"{example.id} exited with {outcome.status}:\n{outcome.output[-4000:]}"
    known = KNOWN_FAILING.get(example.id)
    if known and not re.search(known.says, outcome.output):
        raise AssertionError(f"known-failing, but not as known ({known.says!r}): {report}")
    raise ExampleFailed(report)


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
