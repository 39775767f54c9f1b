"""The ``vane`` command, run as a user runs it: the console script, in a folder of data."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import vane
from tests.ai_server import FakeServer, answer_for

ROOT = Path(__file__).resolve().parents[2]
VANE = str(Path(sys.executable).parent / "vane")  # the console script the install made


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [VANE, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"vane {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    texts = [f"review number {i}, {'great' if i % 2 else 'awful'}" for i in range(6)]
    vane.from_pydict({"id": list(range(6)), "text": texts}).write_parquet(
        tmp_path / "reviews.parquet"
    )
    return tmp_path


def documented() -> list[str]:
    page = (ROOT / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```console\n(.*?)```", page, re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines()]
    return [line[2:] for line in lines if line.startswith("$ ")]


DOCUMENTED_SERVER = "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize("line", documented())
def test_every_documented_command_runs(folder, line):
    args = shlex.split(line)
    assert args[0] == "vane"
    if args[1:3] == ["show", "lengths/"]:  # written by the command before it
        run("sql", "SELECT 1 AS id", "-o", "lengths/", cwd=folder)
    server = FakeServer().start() if DOCUMENTED_SERVER in args else None
    try:
        if server is not None:  # the page's address stands for a server; here, a live one
            args = [server.base_url if a == DOCUMENTED_SERVER else a for a in args]
            args += ["--api-key", "k"]
        run(*args[1:], cwd=folder)
    finally:
        if server is not None:
            server.stop()


def test_sql_prints_and_writes(folder):
    printed = run(
        "sql", "SELECT id, text FROM read_parquet('reviews.parquet') WHERE id = 1", cwd=folder
    )
    assert "review number 1, great" in printed.stdout and "1 row" in printed.stdout
    written = run(
        "sql", "SELECT id FROM read_parquet('reviews.parquet')", "-o", "ids.csv", cwd=folder
    )
    assert "wrote 6 rows" in written.stdout
    assert vane.read_csv(folder / "ids.csv").count() == 6


def test_show_gives_rows_schema_and_first_rows(folder):
    out = run("show", "reviews.parquet", "-n", "2", cwd=folder).stdout
    assert "reviews.parquet: 6 rows" in out
    assert "id BIGINT" in out and "text VARCHAR" in out
    assert "review number 1" in out and "review number 2" not in out


def test_errors_are_one_line_with_status_1_and_usage_errors_2(folder):
    bad = run("sql", "SELECT nope", cwd=folder, check=False)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    deep = run("--traceback", "sql", "SELECT nope", cwd=folder, check=False)
    assert deep.returncode == 1 and "Traceback" in deep.stderr
    assert run("nope", cwd=folder, check=False).returncode == 2
    missing = run("show", "absent.parquet", cwd=folder, check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_prompt_against_a_server(folder):
    server = FakeServer().start()
    try:
        done = run(
            "prompt", "reviews.parquet", "--column", "text", "--model", "m",
            "--base-url", server.base_url, "--api-key", "k", "-o", "answered/",
            "--cache", "answers/", cwd=folder,
        )  # fmt: skip
        assert "wrote 6 rows" in done.stdout
        rows = vane.read_parquet(folder / "answered").order_by("id").to_pylist()
        assert [r["response"] for r in rows] == [answer_for(r["text"]) for r in rows]
        run(
            "prompt", "reviews.parquet", "--column", "text", "--model", "m",
            "--base-url", server.base_url, "--api-key", "k", "-o", "again/",
            "--cache", "answers/", cwd=folder,
        )  # fmt: skip
        assert server.requests == 6  # the rerun was answered from the cache
    finally:
        server.stop()


def test_embed_writes_vectors(folder):
    run("embed", "reviews.parquet", "--column", "text", "-o", "embedded/", cwd=folder)
    embedded = vane.read_parquet(folder / "embedded")
    assert repr(embedded).startswith("Relation[id BIGINT, text VARCHAR, embedding FLOAT[384]]")


@pytest.mark.parametrize(
    ("output", "fmt", "error"),
    [
        ("out.csv", "parquet", "names a csv file, but --format is parquet"),
        ("out.parquet", "json", "names a parquet file, but --format is json"),
        ("out.jsonl", "csv", "names a json file, but --format is csv"),
        ("out.tsv", None, "writes csv uncompressed, to a file whose name ends in .csv"),
        ("out.csv.gz", "csv", "writes csv uncompressed"),
        ("out.JSONL", None, r"ends in .json or .jsonl or .ndjson \(lower case\)"),
    ],
)
def test_an_output_named_for_one_format_is_not_written_in_another(folder, output, fmt, error):
    args = ["sql", "SELECT 1 AS a", "-o", output] + (["--format", fmt] if fmt else [])
    done = run(*args, cwd=folder, check=False)
    assert done.returncode == 1 and re.search(error, done.stderr), done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    assert not (folder / output).exists()


def test_each_output_name_gets_its_format(folder):
    for output, fmt, reader in [
        ("a.csv", None, vane.read_csv),
        ("b.jsonl", "json", vane.read_json),
        ("c.pq", None, vane.read_parquet),
        ("d/", "csv", vane.read_csv),
        ("e.v2", None, vane.read_parquet),
    ]:
        args = ["sql", "SELECT 1 AS a", "-o", output] + (["--format", fmt] if fmt else [])
        run(*args, cwd=folder)
        assert (folder / output).is_file() == (not output.endswith(("/", ".v2")))
        assert reader(folder / output).to_pylist() == [{"a": 1}]


def test_a_template_that_is_not_one_is_a_one_line_error(folder):
    done = run(
        "prompt", "reviews.parquet", "--template", "{0}", "--model", "m",
        "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k", "-o", "out/",
        cwd=folder, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: prompt(): template '{0}': placeholder {0} is positional")
