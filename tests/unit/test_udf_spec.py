"""UDF steps are checked when the plan is built, before anything runs; each error has the fix."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

import vane
from vane.errors import ConfigurationError, SchemaError
from vane.observe.events import BatchDone, StageFinished, StageStarted, StageWaiting
from vane.observe.progress import ProgressDisplay

SCHEMA = {"id": "BIGINT"}


class Model:
    def __init__(self, scale: int = 1) -> None:
        self.scale = scale

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


def identity(batch: pa.Table) -> pa.Table:
    return batch


def test_an_instance_is_refused_with_the_fix():
    with pytest.raises(ConfigurationError) as info:
        vane.range(3).map_batches(Model(), schema=SCHEMA)
    message = str(info.value)
    assert "instance of Model" in message
    assert "Pass the class Model instead of Model(...)" in message
    assert "fn_constructor_args" in message


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"execution_backend": "gpu_cluster"}, "execution_backend='gpu_cluster' is not one of"),
        ({"concurrency": 0}, "concurrency must be a positive number"),
        ({"concurrency": (3, 1)}, r"min <= max"),
        ({"gpus": -1}, "gpus is the number of GPUs per actor and must be >= 0"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"on_error": "ignore"}, "on_error='ignore' is not one of raise, skip, null"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
        ({"execution_backend": "subprocess_task"}, "Model is a class"),
        ({"execution_backend": "ray_actor"}, r"vane.configure\(runner='ray'\)"),
    ],
)
def test_bad_arguments_fail_when_the_step_is_built(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        vane.range(3).map_batches(Model, schema=SCHEMA, **kwargs)


def test_constructor_args_on_a_function_point_to_fn_kwargs():
    with pytest.raises(ConfigurationError, match="Use fn_kwargs"):
        vane.range(3).map_batches(identity, schema=SCHEMA, fn_constructor_args=(1,))


def test_bad_schema_is_a_schema_error():
    with pytest.raises(SchemaError, match="'BIGNIT'"):
        vane.range(3).map_batches(Model, schema={"id": "BIGNIT"})


def test_on_error_null_adds_an_error_column_and_refuses_a_clash():
    rel = vane.range(3).map_batches(Model, schema=SCHEMA, on_error="null")
    assert rel.schema == pa.schema([("id", pa.int64()), ("error", pa.string())])
    with pytest.raises(ConfigurationError, match="already has one"):
        vane.range(3).map_batches(Model, schema={"error": "VARCHAR"}, on_error="null")


def test_explain_shows_backend_batch_size_concurrency_and_resources():
    rel = vane.range(3).map_batches(
        Model,
        schema=SCHEMA,
        batch_size=32,
        concurrency=(1, 4),
        cpus=0.5,
        max_retries=2,
        on_error="skip",
        fn_constructor_kwargs={"scale": 2},
    )
    assert rel.explain().splitlines()[0] == (
        "MapBatches Model -> [id] backend=thread batch_size=32 concurrency=(1, 4) cpus=0.5 "
        "max_retries=2 on_error=skip"
    )
    assert rel.schema == pa.schema([("id", pa.int64())])  # from the declaration, nothing ran


def test_a_sql_step_after_a_udf_binds_against_the_declared_schema():
    rel = vane.range(3).map_batches(Model, schema=SCHEMA)
    with pytest.raises(vane.errors.PlanError, match="Input columns: id"):
        rel.filter("score > 1")


def test_progress_display_draws_rows_rate_and_actors():
    stream = io.StringIO()
    display = ProgressDisplay(stream)
    display(StageStarted("Embedder", 1, 2))
    display(BatchDone("Embedder", 1, 100, 100, 2, 2))
    display(StageFinished("Embedder", 1, 250, 249, 1, 0, 1.5))
    text = stream.getvalue()  # not a terminal: only the final frame (the pty test sees more)
    assert text.endswith("\n")
    text = " ".join(text.split())  # as wrapped to the stream's 80 columns
    assert "Embedder:" in text and "250 rows in, 249 out" in text
    assert "done in 1.5 s, 1 skipped" in text


def test_progress_display_draws_two_steps_of_one_function_on_lines_of_their_own():
    stream = io.StringIO()
    display = ProgressDisplay(stream)
    display(StageStarted("double", 1, 1))
    display(StageStarted("double", 2, 1))
    display(BatchDone("double", 1, 30, 30, 1, 1))
    display(BatchDone("double", 2, 7, 7, 1, 1))
    display(StageFinished("double", 2, 7, 7, 0, 0, 0.5))
    display(StageFinished("double", 1, 30, 30, 0, 0, 0.5))
    text = stream.getvalue()
    assert "30 rows in, 30 out" in text and "7 rows in, 7 out" in text
    assert "37 rows" not in text


def test_progress_display_says_what_a_stage_waits_for_until_it_moves():
    display = ProgressDisplay(io.StringIO())
    display(StageStarted("Embedder", 1, 2))
    state = "waiting for 1 CPU (a read, SQL or write task): 2 of 2 CPUs held by 2 actors"
    display(StageWaiting("Embedder", 1, state))
    assert display.line(1).endswith(state)
    display(StageWaiting("Embedder", 1, None))
    assert display.line(1).endswith("starting")
    display(StageWaiting("Embedder", 1, state))
    display(BatchDone("Embedder", 1, 10, 10, 1, 2))
    assert display.line(1).endswith("1/2 actors busy")
    display(StageFinished("Embedder", 1, 10, 10, 0, 0, 1.0))


def test_progress_is_silent_when_disabled_or_not_a_terminal(capfd):
    vane.configure(progress=True)  # stderr under pytest is not a terminal
    vane.range(10).map_batches(Model, schema=SCHEMA).to_arrow()
    assert capfd.readouterr().err == ""
