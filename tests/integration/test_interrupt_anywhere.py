"""A Ctrl-C anywhere in a write leaves the destination as it was or as the write made it, and
nothing else: no staging directory, no marker, no stray object, no half-made table that the
same write, run again, would stumble on.

Python raises ``KeyboardInterrupt`` on the main thread where it checks for signals: as a
function starts, and as a call of a C function returns. Each test raises it at every such place
in vane's I/O code (``vane/io``) that a write passes, one run per place, from a profile function
(``sys.setprofile``: the main thread only, as a Ctrl-C), and looks at what is left; a run
without an interrupt counts the places. (A trace function's line events would also interrupt
where no signal can land: between a ``with`` block's end and its ``__exit__``.)

What these found: a folder's staging left by an interrupt between its creation and the write's
being noted as under way (``commit.begun``); committed Lance data files deleted by an abort
after the commit (a failed vector index did the same); an object-store write's marker left by
an interrupt after its commit; and an upload stream, dropped by an interrupt, completing its
object after the abort had listed what to remove (``object_puts.close_open``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import vane
from vane.io import commit

IO = os.path.join(str(Path(vane.__file__).parent), "io", "")


class _InterruptAt:
    """A profile function that counts the places in vane/io where Python checks for a signal
    (a function starts; a call of a C function returns) and raises KeyboardInterrupt at the
    ``at``-th: there, and only there, Python's own SIGINT handler can raise it. (Python then
    drops the profile function: one interrupt per run.)"""

    def __init__(self, at: int, files: tuple[str, ...]) -> None:
        self.at = at
        self.files = tuple(os.path.join(IO, name) for name in files) or (IO,)
        self.places = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_return") and frame.f_code.co_filename.startswith(self.files):
            self.places += 1
            if self.places == self.at:
                raise KeyboardInterrupt


def _run(write: Callable[[], object], at: int, files: tuple[str, ...] = ()) -> tuple[bool, int]:
    """Run ``write`` with an interrupt at its ``at``-th place in vane/io; whether it finished
    and how many such places it passed."""
    profile = _InterruptAt(at, files)
    before = _held(), len(commit._stack())
    sys.setprofile(profile)
    try:
        write()
        return True, profile.places
    except KeyboardInterrupt:
        return False, profile.places
    finally:
        sys.setprofile(None)
        locks, actions = before
        # However it ended, the write left no lock of vane's held in this process (the next
        # write would wait for it forever) and no action of its own under way.
        assert _held() <= locks, f"a Ctrl-C at place {at} left locks held"
        assert len(commit._stack()) == actions, f"a Ctrl-C at place {at} left an action under way"


def _held() -> set[object]:
    """The locks this process holds (some, tests' own objects)."""
    held: set[object] = {f for f in commit._FLOCKS if f.descriptor >= 0}
    return held | {f for f in commit._LOCK_FILES if not f.closed}


def rows(n: int = 10, start: int = 0) -> vane.Relation:
    return vane.sql(f"SELECT range AS id, range % 2 AS k FROM range({start}, {start + n})")


def ids(rel: vane.Relation) -> list[int]:
    return sorted(r["id"] for r in rel.select("id").to_pylist())


@dataclass
class Case:
    """A write into ``where``, the state before it (``prepare``) and what a reader sees."""

    write: Callable[[Path], object]
    read: Callable[[Path], list[int] | None]  # None: no destination
    prepare: Callable[[Path], object] = lambda where: None
    before: list[int] | None = None
    after: list[int] = field(default_factory=lambda: list(range(10)))
    # names a finished write leaves in ``where`` beside what it was given (None: not checked)
    kept: set[str] | None = None


def _read_files(name: str, reader: Callable[..., vane.Relation] = vane.read_parquet):
    def read(where: Path) -> list[int] | None:
        path = where / name
        return ids(reader(str(path))) if path.exists() else None

    return read


def _model(batch: pa.Table) -> pa.Table:
    if 3 in batch["id"].to_pylist():
        raise ValueError("the model fails on id 3")
    return batch


def _kept(batch: pa.Table) -> pa.Table:  # a resumable write's step: its answers are kept
    return batch


CASES: dict[str, Case] = {
    "a folder": Case(
        write=lambda w: rows().write_parquet(str(w / "out")),
        read=_read_files("out"),
        kept={"out", ".out.vane-lock"},
    ),
    "one file": Case(
        write=lambda w: rows().write_csv(str(w / "out.csv")),
        read=_read_files("out.csv", vane.read_csv),
        kept={"out.csv", ".out.csv.vane-lock"},
    ),
    "partitions": Case(
        write=lambda w: rows().write_parquet(str(w / "out"), partition_by="k"),
        read=_read_files("out"),
        kept={"out", ".out.vane-lock"},
    ),
    "an append": Case(
        prepare=lambda w: rows(5, 100).write_parquet(str(w / "out")),
        write=lambda w: rows().write_parquet(str(w / "out"), mode="append"),
        read=_read_files("out"),
        before=list(range(100, 105)),
        after=list(range(10)) + list(range(100, 105)),
        kept={"out", ".out.vane-lock"},
    ),
    "an overwrite": Case(
        prepare=lambda w: rows(5, 100).write_parquet(str(w / "out")),
        write=lambda w: rows().write_parquet(str(w / "out"), mode="overwrite"),
        read=_read_files("out"),
        before=list(range(100, 105)),
        kept={"out", ".out.vane-lock"},
    ),
    "a resumable write": Case(
        write=lambda w: (
            rows().map_batches(_kept, batch_size=2).write_parquet(str(w / "out"), resume=True)
        ),
        read=_read_files("out"),
        kept={"out", ".out.vane-lock", ".out.vane-resume"},
    ),
    "a write with its error ledger": Case(
        write=lambda w: (
            rows()
            .map_batches(_model, batch_size=1, on_error="skip")
            .write_parquet(str(w / "out"), errors_to=str(w / "errors.parquet"))
        ),
        read=_read_files("out"),
        after=[i for i in range(10) if i != 3],
        kept={"out", ".out.vane-lock", "errors.parquet", ".errors.parquet.vane-lock"},
    ),
}


# The table formats: their own libraries read them, as any engine would.


def _read_lance(where: Path) -> list[int] | None:
    import lance

    uri = where / "t.lance"
    if not (uri / "_versions").exists():
        return None
    return sorted(lance.dataset(str(uri)).to_table(columns=["id"])["id"].to_pylist())


def _read_delta(where: Path) -> list[int] | None:
    import deltalake

    uri = str(where / "t.delta")
    if not deltalake.DeltaTable.is_deltatable(uri):
        return None
    return sorted(deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id"])["id"].to_pylist())


def _catalog(where: Path) -> dict[str, str]:
    return {
        "name": "test",
        "type": "sql",
        "uri": f"sqlite:///{where / 'catalog.db'}",
        "warehouse": f"file://{where / 'warehouse'}",
    }


def _read_iceberg(where: Path) -> list[int] | None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    if not (where / "catalog.db").exists():
        return None
    try:
        table = load_catalog(**_catalog(where)).load_table("ns.t")
    except NoSuchTableError:
        return None
    found = sorted(table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())
    return found or None  # the write's start makes the table: empty, it holds nothing yet


TABLES: dict[str, Case] = {
    "Lance": Case(
        write=lambda w: rows().write_lance(str(w / "t.lance")),
        read=_read_lance,
    ),
    "Delta": Case(
        write=lambda w: rows().write_deltalake(str(w / "t.delta")),
        read=_read_delta,
    ),
    "Iceberg": Case(
        write=lambda w: rows().write_iceberg("ns.t", catalog_kwargs=_catalog(w)),
        read=_read_iceberg,
    ),
}
_LIBRARIES = {"Lance": "lance", "Delta": "deltalake", "Iceberg": "pyiceberg"}


@pytest.mark.filterwarnings("ignore:map_batches step:UserWarning")
@pytest.mark.parametrize("case", [*CASES, *TABLES], ids=[*CASES, *TABLES])
def test_a_ctrl_c_anywhere_in_a_write_leaves_before_or_after_and_nothing_else(tmp_path, case):
    if case in TABLES:
        pytest.importorskip(_LIBRARIES[case])
    spec = CASES.get(case) or TABLES[case]
    (tmp_path / "whole").mkdir()
    spec.prepare(tmp_path / "whole")
    done, lines = _run(lambda: spec.write(tmp_path / "whole"), 0)
    assert done and lines > 0
    assert spec.read(tmp_path / "whole") == spec.after

    def left(where: Path) -> list[str]:
        return sorted({p.name for p in where.iterdir()} - (spec.kept or set()))

    for at in range(1, lines + 1):
        where = tmp_path / str(at)
        where.mkdir()
        spec.prepare(where)
        done, _ = _run(lambda: spec.write(where), at)  # noqa: B023 (run at once)
        seen = spec.read(where)
        assert seen in (spec.before, spec.after), f"a Ctrl-C at place {at}: {seen}"
        if spec.kept is not None:
            assert left(where) == [], f"a Ctrl-C at place {at} left these"
        if seen == spec.before:  # not committed: the same write, run again, makes it
            spec.write(where)
            assert spec.read(where) == spec.after, f"the rerun after a Ctrl-C at place {at}"


# ---- on an object store ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_client() -> Any:
    pytest.importorskip("moto.server")
    import botocore.session

    from tests.s3_server import local_s3

    # its own process: with the server a thread here, pyarrow's S3 stream, closed by its
    # destructor as an interrupt unwinds, would wait for the server while holding the GIL
    with local_s3(own_process=True) as url:
        client = botocore.session.get_session().create_client("s3", endpoint_url=url)
        client.create_bucket(Bucket="interrupted")
        yield client


def _keys(client: Any, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket="interrupted", Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix) :] for o in listed if not o["Key"].endswith("/"))


@dataclass
class StoreCase:
    """A write to ``<prefix>/<target>`` on the local S3 server."""

    target: str
    write: Callable[[str], object]  # given the URL
    read: Callable[[str], vane.Relation] = vane.read_parquet
    # the state before: made once by a write, then copied object by object under each run's
    # prefix (a write of it per place was a third of the case's time; a copy is the same bytes)
    prepare: Callable[[str], object] | None = None
    before: list[int] | None = None
    after: list[int] = field(default_factory=lambda: list(range(10)))


STORE_CASES: dict[str, StoreCase] = {
    "a folder": StoreCase("out/", lambda url: rows().write_parquet(url)),
    "one file": StoreCase("out.csv", lambda url: rows().write_csv(url), vane.read_csv),
    "an append": StoreCase(
        "out/",
        lambda url: rows().write_parquet(url, mode="append"),
        prepare=lambda url: rows(5, 100).write_parquet(url),
        before=list(range(100, 105)),
        after=list(range(10)) + list(range(100, 105)),
    ),
}


# On a store, the places in the write's own protocol (each run here takes requests of a server:
# the places in building a client or a path are the local cases' too).
PROTOCOL = ("sinks.py", "commit.py", "object_commit.py", "object_puts.py")


# An interrupt raised as a generator is finalized is printed and dropped by Python ("Exception
# ignored"), as a real Ctrl-C landing there would be: the write then goes on to its end.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("case", STORE_CASES, ids=list(STORE_CASES))
def test_a_ctrl_c_anywhere_in_a_write_to_a_store_leaves_before_or_after(s3_client, case):
    spec = STORE_CASES[case]
    name = case.replace(" ", "-")

    def url(at: int) -> str:
        return f"s3://interrupted/{name}/{at}/{spec.target}"

    def seen(at: int) -> list[int] | None:
        keys = _keys(s3_client, f"{name}/{at}/{spec.target}")
        return ids(spec.read(url(at))) if any("_vane_" not in k for k in keys) else None

    def left(at: int) -> list[str]:
        keys = _keys(s3_client, f"{name}/{at}/")
        return [k for k in keys if "_vane_writes/" in k or "_vane_staging/" in k]

    made, before = f"{name}/before/", []
    if spec.prepare is not None:  # the state before: one write, copied (see StoreCase)
        spec.prepare(f"s3://interrupted/{made}{spec.target}")
        listed = s3_client.list_objects_v2(Bucket="interrupted", Prefix=made)["Contents"]
        before = [o["Key"] for o in listed]

    def prepare(at: int) -> None:
        for key in before:
            s3_client.copy_object(
                Bucket="interrupted",
                Key=f"{name}/{at}/{key[len(made) :]}",
                CopySource={"Bucket": "interrupted", "Key": key},
            )

    prepare(0)
    done, lines = _run(lambda: spec.write(url(0)), 0, PROTOCOL)
    assert done and lines > 0
    assert seen(0) == spec.after and left(0) == []
    for at in range(1, lines + 1):
        prepare(at)
        _run(lambda: spec.write(url(at)), at, PROTOCOL)  # noqa: B023 (run at once)
        found = seen(at)
        assert found in (spec.before, spec.after), f"a Ctrl-C at place {at}: {found}"
        assert left(at) == [], f"a Ctrl-C at place {at} left these"


def test_a_stream_abandoned_and_collected_later_aborts_only_what_it_began(tmp_path):
    """A stream left unfinished inside a reference cycle ends when the garbage collector gets
    to it, which may be in the middle of a later write on the same thread: its end aborts what
    the stream began (nothing here), never what that write began since."""
    import gc
    import weakref

    from vane.io.commit import Staging, abort_unfinished, writes_started

    gc.disable()  # (the collection below is the one this test makes)
    try:
        stream = vane.range(50).iter_batches(10)
        assert next(stream).num_rows == 10
        ended = weakref.ref(stream)
        cycle: list[Any] = [stream]
        cycle.append(cycle)
        del stream, cycle
        write = writes_started()  # a later write begins, as the runners' writes do
        try:
            staging = Staging(tmp_path / "out", "error", single_file=False)
            assert ended() is not None  # (still there: the cycle holds it)
            gc.collect()  # the abandoned stream ends here, mid-write
            assert ended() is None
            assert staging.directory.is_dir(), "the stream's end aborted the write's staging"
            (staging.directory / "part-0.parquet").write_bytes(b"")
            staging.commit()
        finally:
            abort_unfinished(write)
        assert (tmp_path / "out" / "part-0.parquet").exists()
    finally:
        gc.enable()


def test_an_action_ends_the_actions_inside_it_that_a_ctrl_c_kept_from_ending(tmp_path):
    """A second Ctrl-C can land as an action inside a write starts its cleanup: the write's
    own end then aborts what that action began. A stream handed out meanwhile is left to its
    reader."""
    from vane.io.commit import Staging, _stack, abort_unfinished, writes_started

    actions = len(_stack())
    write = writes_started()
    writes_started()  # an action inside the write, whose end a Ctrl-C cut short
    kept_from_ending = Staging(tmp_path / "a", "error", single_file=False)
    stream = writes_started(handed_out=True)
    streams = Staging(tmp_path / "b", "error", single_file=False)
    abort_unfinished(write)
    assert not kept_from_ending.directory.exists()
    assert streams.directory.is_dir()
    assert len(_stack()) == actions + 1
    abort_unfinished(stream)
    assert not streams.directory.exists()
    assert len(_stack()) == actions
