"""The ``vane`` command, run as a user runs it: the console script, in a folder of data."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vane
from tests.ai_server import FakeServer, answer_for
from vane import cli

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
# What a documented command must have written, beyond exiting 0: checked where the page's line
# runs, so that a command that loads a model (seconds in a fresh process) runs once.
WRITES = {
    "vane embed reviews.parquet --column text -o embedded/": (
        "embedded",
        "Relation[id BIGINT, text VARCHAR, embedding FLOAT[384]]",
    ),
}


def test_the_commands_whose_output_is_checked_are_documented():
    assert set(WRITES) <= set(documented())


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
    if line in WRITES:
        path, starts = WRITES[line]
        assert repr(vane.read_parquet(folder / path)).startswith(starts)


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


LONG = " ".join(f"a review long enough to be cut in a narrow table, part {i}." for i in range(3))
TABLE_COMMANDS = [
    ["sql", "SELECT id, text FROM read_parquet('long.parquet')"],
    ["show", "long.parquet"],
]


@pytest.mark.parametrize("command", TABLE_COMMANDS, ids=["sql", "show"])
@pytest.mark.parametrize("width", [None, 30, 80, 250])
def test_max_width_sets_how_wide_a_printed_table_is(tmp_path, command, width):
    vane.from_pydict({"id": [1, 2], "text": [LONG, "short"]}).write_parquet(
        tmp_path / "long.parquet"
    )
    asked = [] if width is None else ["--max-width", str(width)]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # not a terminal: 120
    done = subprocess.run(
        [VANE, *command, *asked], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=True,
    )  # fmt: skip
    table = [line for line in done.stdout.splitlines() if line[:1] in "┌│├└"]
    widest = max(len(line) for line in table)
    assert widest <= (width or 120), done.stdout
    if width is not None and width >= len(LONG) + 20:  # room for all of it
        assert LONG in done.stdout
    else:
        assert LONG not in done.stdout and f"({len(LONG):,} chars)" in done.stdout
        assert widest == (width or 120)  # the room there is, all of it


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
    assert done.stderr.startswith("error: template '{0}': placeholder {0} is positional")


# ---- the command line's words --------------------------------------------------------------

P = ["prompt", "reviews.parquet", "-o", "out/", "--model", "m", "--api-key", "k"]
NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sql", "SELECT 1", "-o", "reviews.parquet"], "Pass --mode overwrite to replace it"),
        (["sql", "SELECT 1", "-o", "o/", "--mode", "bad"], "--mode bad is not one of error,"),
        (["sql", "SELECT 1", "-o", "reviews.parquet", "--mode", "append"], "--mode append adds"),
        (["sql", "SELECT [1] AS l", "-o", "o.csv"], 'for example l::VARCHAR AS "l" in the query'),
        (["sql", "SELECT 1", "--max-width", "5"], "--max-width 5 must be a whole number of"),
        (["show", "reviews.parquet", "--max-width", "5"], "--max-width 5 must be a whole number"),
        ([*P, "--base-url", NOWHERE], "vane prompt needs the prompt column, or --template"),
        ([*P, "--column", "text", "--on-error", "bad"], "--on-error bad is not one of"),
        ([*P, "--column", "text", "--max-concurrent-requests", "0"], "--max-concurrent-requests"),
        (
            [*P, "--column", "text", "--base-url", NOWHERE],
            ("or pass the --base-url it listens at", "Pass --on-error null to keep"),
        ),
        ([*P, "--column", "text", "--cache", "reviews.parquet"], "--cache reviews.parquet cannot"),
        (["prompt", "reviews.parquet", "-o", "o/", "--column", "text"], "needs --model, the"),
        (
            ["embed", "reviews.parquet", "-o", "o/", "--column", "text", "--provider", "openai",
             "--model", "m"],
            "set OPENAI_API_KEY or pass --api-key; for another OpenAI-compatible server pass "
            "--base-url",
        ),
    ],
)  # fmt: skip
def test_messages_use_the_command_lines_words(folder, args, says):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [VANE, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    for said in [says] if isinstance(says, str) else says:  # one run, what it must all say
        assert done.returncode == 1 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    outside_backticks = re.sub(r"`[^`]*`", "", done.stderr)
    assert not re.search(r"\b[a-z_]+=|\b[a-z_]+\(\)", outside_backticks), done.stderr


def test_a_warning_is_one_line_in_the_command_lines_words(folder):
    done = run(
        *P, "--column", "text", "--base-url", NOWHERE, "--on-error", "null", cwd=folder
    )  # fmt: skip
    (warning,) = done.stderr.strip().splitlines()
    assert warning.startswith("warning: udf step `prompt[openai m](text)` kept 6 failing row")
    assert "pass --error-column error" in warning and "error_column" not in warning
    run(*P, "--column", "text", "--base-url", NOWHERE, "--on-error", "null",
        "--error-column", "why", "--mode", "overwrite", cwd=folder)  # fmt: skip
    why = [r["why"] for r in vane.read_parquet(folder / "out").to_pylist()]
    assert all(w.startswith(f"cannot reach {NOWHERE}: ") for w in why), why


@given(
    data=st.data(),
    value=st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.booleans()),
)
def test_a_python_argument_in_a_message_reads_as_its_option(data, value):
    command = data.draw(st.sampled_from([cli.sql, cli.prompt, cli.embed]))
    options = cli._options(command)
    name = data.draw(st.sampled_from(sorted(options)))
    flag, negative = options[name]
    said = cli._in_shell_words(f"Pass {name}={value!r} to `step {name}={value!r}`.", command)
    quoted = f" to `step {name}={value!r}`."  # a step's name is left as it is
    assert said.endswith(quoted)
    pass_ = said.removesuffix(quoted)  # (the value may say " to " itself)
    if value is True or value is False:
        assert shlex.split(pass_) == ["Pass", flag if value else negative]
    else:
        assert shlex.split(pass_) == ["Pass", flag, str(value)]


@pytest.mark.parametrize("command", [[], ["sql"], ["show"], ["explain"], ["prompt"], ["embed"]])
def test_help_shows_arguments_and_flags_as_a_shell_does(folder, command):
    out = run(*command, "--help", cwd=folder).stdout
    assert "<bool>" not in out, out
    if command:
        usage = next(line for line in out.splitlines() if "Usage:" in line)
        argument = {"sql": "QUERY", "show": "PATH", "explain": "QUERY"}.get(command[0], "INPUT")
        assert usage.split() == ["Usage:", "vane", command[0], "[OPTIONS]", argument]


# ---- rows to stdout, a plan -------------------------------------------------------------------

TYPED = (
    "SELECT id, text, id * 1.5 AS x, DATE '2024-01-01' + id::INT AS d, [id, id + 1] AS l "
    "FROM read_parquet('reviews.parquet')"
)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_sql_sends_every_row_to_stdout_in_a_format(folder, fmt):
    query = TYPED if fmt != "csv" else "SELECT id, text FROM read_parquet('reviews.parquet')"
    done = subprocess.run(
        [VANE, "sql", query, "--format", fmt], cwd=folder, capture_output=True, timeout=300,
        check=True,
    )  # fmt: skip
    (folder / f"piped.{fmt}").write_bytes(done.stdout)
    (folder / "written").mkdir()
    run("sql", query, "-o", f"written/out.{fmt}", cwd=folder)
    assert done.stdout == (folder / "written" / f"out.{fmt}").read_bytes() or fmt == "parquet"
    reader = getattr(vane, f"read_{fmt}")
    piped = reader(folder / f"piped.{fmt}").to_arrow()
    assert piped.equals(reader(folder / "written" / f"out.{fmt}").to_arrow())
    assert piped.num_rows == 6 and done.stderr == b""
    first = subprocess.run(
        [VANE, "sql", query, "--format", fmt, "-n", "2"], cwd=folder, capture_output=True,
        timeout=300, check=True,
    )  # fmt: skip
    (folder / f"two.{fmt}").write_bytes(first.stdout)
    assert reader(folder / f"two.{fmt}").to_arrow().equals(piped.slice(0, 2))


def test_a_reader_that_leaves_stops_the_job_quietly(folder):
    process = subprocess.Popen(
        [VANE, "sql", SLOW_ROWS, "--format", "csv"], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == b'"h"\n'
    process.stdout.close()  # as `| head -1` does
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (141, b"")  # 128 + SIGPIPE, as a shell tool ends


def test_parquet_is_not_sent_to_a_terminal(folder):
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [VANE, "sql", "SELECT 1 AS a", "--format", "parquet"], cwd=folder, stdout=follower,
            stderr=subprocess.PIPE, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 1 and "redirect it (> out.parquet)" in done.stderr


def test_explain_shows_how_duckdb_runs_the_query(folder):
    out = run(
        "explain", "SELECT count(*) AS n FROM read_parquet('reviews.parquet') WHERE id > 2",
        cwd=folder,
    ).stdout  # fmt: skip
    assert "SELECT" not in out  # the plan, not the query back
    assert "Read Parquet" in out.title() and "Filters: id > 2" in out and "count_star" in out


@pytest.mark.parametrize(
    ("query", "says"),
    [
        (
            "SELECT * FROM read_parquet('https://example.invalid/x.parquet')",
            "read remote files with vane's readers",
        ),
        ("SELECT * FROM 's3://bucket/x.parquet'", "read remote files with vane's readers"),
        (
            "SELECT * FROM read_csv('hf://datasets/x/y.csv')",
            "read remote files with vane's readers",
        ),
        ("SELECT * FROM read_xlsx('a.xlsx')", "what the excel extension provides cannot"),
        ("SELECT st_point(1, 2)", "what the spatial extension provides cannot be used"),
        ("SELECT nope", 'Referenced column "nope" was not found'),
        ("SELECT nope FROM range(3)", 'Referenced column "nope" not found'),
    ],
)
def test_sql_errors_give_only_advice_that_works_in_vane(folder, query, says):
    done = run("sql", query, cwd=folder, check=False)
    for said in [says] if isinstance(says, str) else says:  # one run, what it must all say
        assert done.returncode == 1 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    # DuckDB's own advice cannot be followed: vane's DuckDB loads no extension, sql() runs no SET
    assert "INSTALL" not in done.stderr and "autoinstall" not in done.stderr
    assert "Input columns" not in done.stderr  # a query over files has no input to list


# ---- Ctrl-C ---------------------------------------------------------------------------------

# `vane` with a watcher that prints "running" once the main thread is inside the action, in
# DuckDB or writing rows: the test interrupts it then, whatever the time.
INTERRUPTIBLE = """
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, however started
from vane.cli import run

def inside(frame, *places):
    while frame is not None:
        if any(place in frame.f_code.co_filename for place in places):
            return True
        frame = frame.f_back
    return False

def tell_when_running():
    main = threading.main_thread()
    execution = os.path.join("vane", "execution", "")
    work = (os.path.join("duckdb", ""), os.path.join("vane", "io", ""))
    while True:
        frame = sys._current_frames().get(main.ident)
        if inside(frame, execution) and inside(frame, *work):
            print("running", flush=True)
            return
        time.sleep(0.01)

threading.Thread(target=tell_when_running, daemon=True).start()
sys.argv = ["vane", *sys.argv[1:]]
run()
"""
SLOW_SUM = "SELECT sum(hash(range)) AS s FROM range(10000000000)"  # minutes of DuckDB work
SLOW_ROWS = "SELECT hash(range) AS h FROM range(10000000000)"


@pytest.mark.parametrize(
    "args",
    [
        ["sql", SLOW_SUM],
        ["sql", SLOW_SUM, "-o", "out.parquet"],
        ["sql", SLOW_ROWS, "-o", "out/"],
        ["sql", SLOW_ROWS, "--format", "csv"],
    ],
    ids=["printing", "aggregate-to-a-file", "streaming-to-a-folder", "streaming-to-stdout"],
)
def test_ctrl_c_is_one_line_and_status_130(tmp_path, args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE, *args], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:  # polls its output: "running" once the query runs
            if line.endswith("running\n"):  # (after any rows it sent to stdout)
                break
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert (process.returncode, err) == (130, "interrupted\n")
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging left behind


# ---- counts -----------------------------------------------------------------------------------

USAGE_NAMES = {
    "requests": "request",
    "prompt_tokens": "prompt token",
    "completion_tokens": "completion token",
    "retries": "retry",
    "cache_hits": "cache hit",
    "failures": "failure",
}


@given(
    usage=st.dictionaries(st.sampled_from(sorted(USAGE_NAMES)), st.integers(0, 10**7)),
    rows=st.integers(0, 10**7),
    files=st.integers(0, 3),
)
def test_a_count_of_one_says_its_noun_once(usage, rows, files):
    from vane.io.sinks import WriteResult
    from vane.observe.events import StageFinished

    step = StageFinished("s", 1, rows, rows, 0, 0, 1.0, usage)
    said = str(WriteResult("out", rows, files, 0, 1.0, steps=(step,) if usage else ()))
    for name, count in usage.items():
        one = USAGE_NAMES[name]
        noun = one if count == 1 else one.removesuffix("y") + "ies" if one == "retry" else one + "s"
        assert f"{count:,} {noun}" in said
    assert (
        f"wrote {rows:,} row{'s' * (rows != 1)} to out in {files} file{'s' * (files != 1)} ("
        in said
    )
    assert step.summary().startswith(f"{rows:,} row{'s' * (rows != 1)} in,")


def test_the_command_counts_one_as_one(folder):
    assert "wrote 1 row to" in run("sql", "SELECT 1 AS a", "-o", "one.csv", cwd=folder).stdout
    assert "one.csv: 1 row\n" in run("show", "one.csv", cwd=folder).stdout
    server = FakeServer().start()
    try:
        done = run(
            "prompt", "one.csv", "--template", "say {a}", "--model", "m", "--base-url",
            server.base_url, "--api-key", "k", "-o", "answered/", cwd=folder,
        )  # fmt: skip
    finally:
        server.stop()
    assert "in 1 file" in done.stdout and "(prompt[openai m](a): 1 request, " in done.stdout
