"""All or nothing, whatever is killed when: a real writer process is SIGKILLed at each step of
each commit (held there by the VANE_COMMIT_PAUSE hook), and a vane read must then see the whole
write or none of it; the next write cleans up what the dead one left. Concurrent writers and
readers never produce or see a mix either."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import vane
from tests.integration.commit_writer import write_rows

ROOT = Path(__file__).resolve().parents[2]


def writer(
    path: Path,
    fmt: str,
    mode: str,
    *,
    start: int,
    rows: int,
    partitioned: bool,
    pause: str = "",
    rows_per_file: int = 0,
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, VANE_COMMIT_PAUSE=pause)
    args = [str(path), fmt, mode, str(start), str(rows), "1" if partitioned else "0"]
    args.append(str(rows_per_file))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.commit_writer", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def write(path: Path, fmt: str, mode: str, *, start: int, rows: int, partitioned: bool) -> None:
    """A write that is not killed, in this process: the same commit as a writer process's
    (nothing here is held or killed), without the second or so of starting one."""
    write_rows(str(path), fmt, mode, start=start, rows=rows, partitioned=partitioned, per_file=0)


def pause_at(
    step: str, path: Path, fmt: str, mode: str, *, partitioned: bool, tmp: Path, **options: int
) -> tuple[subprocess.Popen[bytes], Path]:
    """A writer of rows 1000..1039 held at ``step`` while the returned marker file exists."""
    marker = tmp / f"paused-{step}"
    pause = f"{step}:{marker}"
    process = writer(
        path, fmt, mode, start=1000, rows=40, partitioned=partitioned, pause=pause, **options
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if process.poll() is not None:
            raise AssertionError(f"the writer ended before {step}: {process.stderr.read()!r}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the writer never reached {step}")
        time.sleep(0.02)
    return process, marker


def kill_at(
    step: str, path: Path, fmt: str, mode: str, *, partitioned: bool, tmp: Path, **options: int
) -> None:
    process, _ = pause_at(step, path, fmt, mode, partitioned=partitioned, tmp=tmp, **options)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def ids(path: Path, fmt: str) -> list[int]:
    reader = getattr(vane, "read_json" if fmt == "json" else f"read_{fmt}")
    return sorted(row["id"] for row in reader(path).select("id").to_pylist())


def groups(path: Path) -> dict[int, int]:
    """Rows per writer's run (column w)."""
    rel = vane.read_parquet(path).aggregate("count(*) AS n", group_by="w")
    return {row["w"]: row["n"] for row in rel.to_pylist()}


def leftovers(path: Path) -> list[str]:
    """Anything a write leaves that is not the data or the destination's lock."""
    beside = [n for n in os.listdir(path.parent) if n not in (path.name, f".{path.name}.vane-lock")]
    inside = [str(p) for p in path.rglob(".vane-*")] if path.is_dir() else []
    return beside + inside


OLD = list(range(20))
NEW = list(range(1000, 1040))
STEPS = [
    ("error", "staged"),
    ("error", "locked"),
    ("overwrite", "staged"),
    ("overwrite", "locked"),
    ("overwrite", "swapped"),
    ("append", "staged"),
    ("append", "locked"),
    ("append", "journaled"),
    ("append", "moving"),
]


def _expected(mode: str, step: str) -> list[int]:
    """What a vane read sees after the kill: the steps before the commit's one atomic step
    (or, for an append, before its journal) leave the old data; the rest, all of the new."""
    committed = step in ("swapped", "journaled", "moving")
    if mode == "append":
        return sorted(OLD + NEW) if committed else OLD
    if mode == "overwrite":
        return NEW if committed else OLD
    return []


@pytest.mark.slow
@pytest.mark.parametrize("partitioned", [False, True], ids=["files", "partitioned"])
@pytest.mark.parametrize(("mode", "step"), STEPS)
def test_a_kill_at_any_step_leaves_all_of_the_write_or_none(tmp_path, mode, step, partitioned):
    out = tmp_path / "data" / "out"
    if mode != "error":
        write(out, "parquet", "error", start=0, rows=20, partitioned=partitioned)
    kill_at(step, out, "parquet", mode, partitioned=partitioned, tmp=tmp_path)
    seen = ids(out, "parquet") if out.exists() else []
    assert seen == _expected(mode, step)
    assert not list(out.rglob(".vane-commit-*")) if out.exists() else True
    # The next write removes what the killed one left, and the data stays whole.
    write(out, "parquet", "append", start=5000, rows=3, partitioned=partitioned)
    assert leftovers(out) == []
    assert ids(out, "parquet") == sorted([*_expected(mode, step), 5000, 5001, 5002])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize(("mode", "step"), [("overwrite", "swapped"), ("append", "moving")])
def test_other_formats_and_single_files_hold_the_same_promise(tmp_path, fmt, mode, step):
    out = tmp_path / "out"
    write(out, fmt, "error", start=0, rows=20, partitioned=False)
    kill_at(step, out, fmt, mode, partitioned=False, tmp=tmp_path)
    assert ids(out, fmt) == _expected(mode, step)
    single = tmp_path / "single" / ("one.csv" if fmt == "csv" else "one.jsonl")
    write(single, fmt, "error", start=0, rows=20, partitioned=False)
    kill_at("locked", single, fmt, "overwrite", partitioned=False, tmp=tmp_path)
    assert ids(single, fmt) == OLD
    write(single, fmt, "overwrite", start=1000, rows=40, partitioned=False)
    assert ids(single, fmt) == NEW and leftovers(single) == []


def test_a_reader_finishes_an_append_its_writer_died_in(tmp_path):
    out = tmp_path / "out"
    write(out, "parquet", "error", start=0, rows=20, partitioned=False)
    kill_at("moving", out, "parquet", "append", partitioned=False, tmp=tmp_path)
    assert list(out.glob(".vane-commit-*"))  # the journal of the unfinished append
    assert ids(out, "parquet") == sorted(OLD + NEW)
    assert not list(out.glob(".vane-commit-*"))


HELPER_FORKING_WRITER = """
import os, sys, time
import vane

out, alive = sys.argv[1:3]


def fork_a_helper(batch):
    folder = os.path.dirname(out)
    for _ in range(60000):  # (the write's staging exists before the helper is made)
        if os.path.isdir(folder) and any(".vane-staging-" in n for n in os.listdir(folder)):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("no staging directory while the UDF ran")
    if os.fork() == 0:  # the UDF's own helper process, which outlives its writer
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)  # (its writer's pipes: a test reading them sees their end)
        os.dup2(quiet, 2)
        while os.path.exists(alive):
            time.sleep(0.05)
        os._exit(0)
    return batch


vane.configure(progress=False)
vane.range(40).map_batches(fork_a_helper, schema={"id": "BIGINT"}).write_parquet(out)
"""


def test_a_killed_writers_staging_goes_even_while_a_process_it_forked_lives(tmp_path):
    """A process the job forked (a UDF's multiprocessing pool, a DataLoader's workers) holds
    no copy of the staging's lock: the next write knows the killed writer's staging for dead
    while that process lives on, and removes it."""
    out, alive, marker = tmp_path / "data" / "out", tmp_path / "alive", tmp_path / "paused"
    alive.touch()
    process = subprocess.Popen(
        [sys.executable, "-c", HELPER_FORKING_WRITER, str(out), str(alive)],
        cwd=tmp_path,
        env=dict(os.environ, VANE_COMMIT_PAUSE=f"staged:{marker}"),
        stderr=subprocess.PIPE,
    )
    try:
        while not marker.exists():
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert [n for n in os.listdir(out.parent) if ".vane-staging-" in n]  # the dead one's
        write(out, "parquet", "overwrite", start=0, rows=20, partitioned=False)
        assert ids(out, "parquet") == OLD and leftovers(out) == []
    finally:
        alive.unlink()  # the helper ends


def test_a_symlinked_destination_stays_a_symlink(tmp_path):
    target = tmp_path / "real"
    link = tmp_path / "link"
    write(target, "parquet", "error", start=0, rows=20, partitioned=False)
    link.symlink_to(target)
    vane.range(5).write_parquet(link, mode="overwrite")
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert vane.read_parquet(link).count() == 5 == vane.read_parquet(target).count()
    vane.range(3).write_parquet(link, mode="append")
    assert link.is_symlink() and vane.read_parquet(target).count() == 8
    single = tmp_path / "one.parquet"
    vane.range(2).write_parquet(tmp_path / "elsewhere.parquet")
    single.symlink_to(tmp_path / "elsewhere.parquet")
    vane.range(7).write_parquet(single, mode="overwrite")
    assert single.is_symlink() and vane.read_parquet(tmp_path / "elsewhere.parquet").count() == 7


@pytest.mark.slow
def test_concurrent_writers_and_readers_never_make_or_see_a_mix(tmp_path):
    out = tmp_path / "out"
    vane.sql("SELECT range AS id, -1 AS w FROM range(300)").write_parquet(out)
    sizes = {-1: 300}
    script = textwrap.dedent(
        """
        import sys, vane
        vane.configure(progress=False)
        path, mode, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
        for w in range(first, first + 4):
            n = 300 if mode == "overwrite" else 100
            rel = vane.sql(f"SELECT range AS id, {w} AS w FROM range({n})")
            rel.write_parquet(path, mode=mode, rows_per_file=40)
        """
    )
    runs = [("overwrite", 100), ("overwrite", 200), ("append", 300), ("append", 400)]
    for mode, first in runs:
        for w in range(first, first + 4):
            sizes[w] = 300 if mode == "overwrite" else 100
    stop = threading.Event()
    mixes: list[dict[int, int]] = []
    vanished: list[str] = []
    reads = [0]

    def read_in_a_loop() -> None:
        while not stop.is_set():
            try:
                counts = groups(out)
            except vane.errors.VaneError as error:
                # Files listed when the relation was built can be replaced before it is read.
                vanished.append(str(error))
                continue
            reads[0] += 1
            if (
                any(n != sizes[w] for w, n in counts.items())
                or sum(1 for w in counts if sizes[w] == 300) != 1
            ):
                mixes.append(counts)

    readers = [threading.Thread(target=read_in_a_loop) for _ in range(2)]
    for thread in readers:
        thread.start()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(out), mode, str(first)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
        )
        for mode, first in runs
    ]
    errors = [p.communicate(timeout=300)[1].decode() for p in processes]
    stop.set()
    for thread in readers:
        thread.join()
    assert [p.returncode for p in processes] == [0, 0, 0, 0], "\n".join(errors)[-3000:]
    assert mixes == [] and reads[0] > 0
    bad = [e for e in vanished if "no longer exist" not in e]
    assert not bad, bad[0]
    final = groups(out)
    assert all(n == sizes[w] for w, n in final.items())
    assert sum(1 for w in final if sizes[w] == 300) == 1
    assert leftovers(out) == []


# ---- every way of naming the files reads under the commit protocol ------------------------------

# How a reader may name what an append writes into: the destination's files by a glob, a list
# holding that glob, one partition's directory, the destination through a symlink (as a
# directory and by a glob), and the directory itself. Each must see all of an append or none.
READ_PATHS = ["glob", "list", "partition", "symlink", "symlink-glob", "directory"]


def read_by(how: str, out: Path, *, partitioned: bool) -> list[int]:
    """The ids read through ``how``; for a partition, those of partition k=0 (id % 5 == 0)."""
    inner = "*/*.parquet" if partitioned else "*.parquet"
    link = out.parent / "link"
    if how.startswith("symlink") and not link.exists():
        link.symlink_to(out)
    path: str | list[str] = {
        "glob": f"{out}/{inner}",
        "list": [f"{out}/{inner}"],
        "partition": f"{out}/k=0",
        "symlink": str(link),
        "symlink-glob": f"{link}/{inner}",
        "directory": str(out),
    }[how]
    rows = vane.read_parquet(path).select("id").to_pylist()
    return sorted(row["id"] for row in rows)


def _seen(how: str, ids: list[int]) -> list[int]:
    return [i for i in ids if i % 5 == 0] if how == "partition" else ids


@pytest.mark.slow
@pytest.mark.parametrize("how", READ_PATHS)
@pytest.mark.parametrize("step", ["journaled", "moving"])
def test_every_read_path_finishes_an_append_its_writer_died_in(tmp_path, how, step):
    partitioned = how == "partition"
    out = tmp_path / "data" / "out"
    # Several files per partition, so that one moved file is part of a partition's rows.
    per_file = {"rows_per_file": 2 if partitioned else 5}
    write(out, "parquet", "error", start=0, rows=20, partitioned=partitioned)
    kill_at(step, out, "parquet", "append", partitioned=partitioned, tmp=tmp_path, **per_file)
    assert list(out.glob(".vane-commit-*"))  # the journal of the unfinished append
    assert read_by(how, out, partitioned=partitioned) == _seen(how, sorted(OLD + NEW))
    assert not list(out.glob(".vane-commit-*"))


def _waits_on(lock: Path) -> bool:
    """Whether some process waits for an flock on ``lock`` (Linux's /proc/locks lists each
    waiter as ``-> FLOCK ...`` with the file's device and inode)."""
    status = os.stat(lock)
    device = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    with open("/proc/locks") as locks:
        return any("->" in line and device in line.split() for line in locks)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
@pytest.mark.parametrize("how", READ_PATHS)
def test_a_read_during_an_append_waits_for_all_of_it(tmp_path, how):
    # The writer is held after moving the first of its files; a reader starts, and the writer
    # goes on only once the reader has either finished (it did not wait: before the fix, a
    # glob saw that one file) or is waiting for the destination's lock. Nothing here depends on
    # how fast anything runs.
    partitioned = how == "partition"
    out = tmp_path / "data" / "out"
    per_file = {"rows_per_file": 2 if partitioned else 5}
    write(out, "parquet", "error", start=0, rows=20, partitioned=partitioned)
    process, marker = pause_at(
        "moving", out, "parquet", "append", partitioned=partitioned, tmp=tmp_path, **per_file
    )
    seen: list[list[int]] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            seen.append(read_by(how, out, partitioned=partitioned))
        except BaseException as error:
            failures.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    lock = out.parent / f".{out.name}.vane-lock"
    deadline = time.monotonic() + 120  # a guard against a hang, not a measure
    while reader.is_alive() and not _waits_on(lock):
        assert time.monotonic() < deadline, "the reader neither finished nor waited"
        time.sleep(0.01)
    marker.unlink()  # the writer goes on
    _, err = process.communicate(timeout=120)
    reader.join(timeout=120)
    assert process.returncode == 0, err.decode()[-2000:]
    assert not failures, failures
    assert seen == [_seen(how, sorted(OLD + NEW))]


@pytest.mark.slow
def test_reads_by_every_path_beside_appends_never_see_part_of_one(tmp_path):
    # Readers loop beside a process appending twenty one-row files at a time; a read that sees
    # some but not all of an append's files is a partial read. On a slow machine fewer reads
    # overlap an append (the test is weaker there), but none may be partial.
    out = tmp_path / "out"
    vane.sql("SELECT range AS id, -1 AS w FROM range(20)").write_parquet(out, rows_per_file=1)
    script = textwrap.dedent(
        """
        import sys, vane
        vane.configure(progress=False)
        for w in range(12):
            rel = vane.sql(f"SELECT range AS id, {w} AS w FROM range(20)")
            rel.write_parquet(sys.argv[1], mode="append", rows_per_file=1)
        """
    )
    link = tmp_path / "link"
    link.symlink_to(out)
    paths: list[str | list[str]] = [f"{out}/*.parquet", [f"{out}/*.parquet"], f"{link}/*.parquet"]
    paths += [str(link), str(out)]
    done = threading.Event()
    partial: list[dict[int, int]] = []
    errors: list[BaseException] = []
    reads = [0]

    def read_in_a_loop(path: str | list[str]) -> None:
        while True:
            finished = done.is_set()  # one more read after the writer is done: at least one
            try:
                rows = vane.read_parquet(path).aggregate("count(*) AS n", group_by="w")
                counts = {r["w"]: r["n"] for r in rows.to_pylist()}
            except BaseException as error:
                errors.append(error)
                return
            reads[0] += 1
            if any(n != 20 for n in counts.values()):
                partial.append(counts)
            if finished:
                return

    readers = [threading.Thread(target=read_in_a_loop, args=(p,)) for p in paths]
    for thread in readers:
        thread.start()
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(out)], cwd=ROOT, stderr=subprocess.PIPE
    )
    _, err = process.communicate(timeout=300)
    done.set()
    for thread in readers:
        thread.join()
    assert process.returncode == 0, err.decode()[-3000:]
    assert not errors, errors[0]
    assert partial == [] and reads[0] >= len(paths)
    final = vane.read_parquet(f"{out}/*.parquet").aggregate("count(*) AS n", group_by="w")
    assert {r["w"]: r["n"] for r in final.to_pylist()} == dict.fromkeys(range(-1, 12), 20)
