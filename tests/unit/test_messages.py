"""Mistakes a new user makes get a message that names the mistake and the fix: a misspelled
keyword with the closest valid names, a missing argument with what it is for, a class called on
a column, a column that does not exist with the closest names, a function that fails before any
batch worked without the advice to skip its rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import vane
from vane import col
from vane.errors import ArgumentError, ConfigurationError, PlanError, UDFError

rel = vane.from_pydict({"id": [1, 2], "txt": ["a", "b"]})


def identity(batch: pa.Table) -> pa.Table:
    return batch


TYPOS: dict[str, tuple[Callable[[], Any], str, str]] = {
    "map_batches": (
        lambda: rel.map_batches(identity, schema=rel.schema, btach_size=2),
        "btach_size",
        "batch_size",
    ),
    "map": (
        lambda: rel.map(lambda r: r, schema=rel.schema, concurency=2),
        "concurency",
        "concurrency",
    ),
    "flat_map": (
        lambda: rel.flat_map(lambda r: [r], schema=rel.schema, on_eror="skip"),
        "on_eror",
        "on_error",
    ),
    "write_parquet": (lambda: rel.write_parquet("x", mod="overwrite"), "mod", "mode"),
    "iter_batches": (lambda: rel.iter_batches(batchsize=1), "batchsize", "batch_size"),
    "join": (lambda: rel.join(rel, on="id", hwo="left"), "hwo", "how"),
    "func": (lambda: vane.func(retrun_dtype="BIGINT"), "retrun_dtype", "return_dtype"),
    "cls": (lambda: vane.cls(gpu=1), "gpu", "gpus"),
    "configure": (lambda: vane.configure(runer="ray"), "runer", "runner"),
    "from_arrow": (lambda: vane.from_arrow(dat=pa.table({"a": [1]})), "dat", "data"),
}


@pytest.mark.parametrize("verb", list(TYPOS))
def test_a_misspelled_keyword_names_the_closest_valid_one(verb):
    call, wrong, right = TYPOS[verb]
    with pytest.raises(
        ArgumentError,
        match=rf"{verb}\(\): it takes no argument '{wrong}' \(did you mean '{right}'\?\)",
    ):
        call()
    with pytest.raises(TypeError):  # what Python code catches for a bad call
        call()


def test_a_missing_argument_is_named():
    with pytest.raises(
        ArgumentError, match=r"read_parquet\(\): missing a required argument: 'path'"
    ):
        vane.read_parquet()  # type: ignore[call-arg]


class Model:
    def __init__(self, model_path: str) -> None:
        self.model_path = model_path

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


def test_a_misspelled_constructor_keyword_is_named_not_the_argument_it_hides():
    with pytest.raises(
        ConfigurationError, match=r"no argument 'model_pth' \(did you mean 'model_path'\?\)"
    ):
        rel.map_batches(Model, schema=rel.schema, fn_constructor_kwargs={"model_pth": "x"})


@vane.cls
class Shout:
    def __init__(self, times: int = 1) -> None:
        self.times = times

    def __call__(self, text: str) -> str:
        return text.upper() * self.times

    def batch(self, batch: pa.Table) -> pa.Table:
        return batch


def test_a_class_called_on_a_column_says_to_build_an_instance_first():
    with pytest.raises(ConfigurationError, match=r"Shout\(\)\(col\('x'\)\)"):
        Shout(col("txt"))


def test_a_vane_cls_instance_runs_in_map_batches_with_its_recorded_arguments():
    class Repeat:
        def __init__(self, times: int) -> None:
            self.times = times

        def __call__(self, batch: pa.Table) -> dict[str, Any]:
            return {"txt": [t * self.times for t in batch["txt"].to_pylist()]}

    repeat = vane.cls(Repeat)
    out = rel.map_batches(repeat(3), schema={"txt": "VARCHAR"}).to_pylist()
    assert out == [{"txt": "aaa"}, {"txt": "bbb"}]
    with pytest.raises(ConfigurationError, match="already holds constructor arguments"):
        rel.map_batches(repeat(3), schema={"txt": "VARCHAR"}, fn_constructor_args=(2,))


def test_a_column_that_does_not_exist_is_named_with_the_closest_ones():
    with pytest.raises(
        PlanError, match=r"select\(\): there is no column 'tx' \(did you mean 'txt'\?\)"
    ):
        rel.select(col("tx"))
    with pytest.raises(PlanError, match=r"with_column\(\): there is no column 'idd'"):
        rel.with_column("y", col("idd") + 1)
    assert rel.filter(col("ID") > 1).count() == 1  # names are case-insensitive, as in DuckDB


def missing_key(batch: pa.Table) -> dict[str, Any]:
    return {"v": batch["nope"]}


def fails_from_row_3(batch: pa.Table) -> dict[str, Any]:
    if 3 in batch["id"].to_pylist():
        raise ValueError("row 3")
    return {"id": batch["id"]}


def test_skipping_rows_is_suggested_only_once_some_rows_worked():
    with pytest.raises(UDFError) as failed:
        rel.map_batches(missing_key, schema={"v": "BIGINT"}).to_arrow()
    assert "no batch has succeeded yet" in str(failed.value)
    assert "on_error='null'" not in str(failed.value)
    with pytest.raises(UDFError, match="pass on_error='skip' to drop failing rows"):
        vane.range(6).map_batches(
            fails_from_row_3, schema={"id": "BIGINT"}, batch_size=1
        ).to_arrow()
