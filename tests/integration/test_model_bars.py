"""Model libraries draw no progress bars in vane's workers ("Loading weights", downloads) unless
asked (``vane.configure(model_progress=True)``, or the user's own ``HF_HUB_DISABLE_PROGRESS_BARS``);
the user's own process keeps its settings. Each run is a Python of its own, as a user's script,
loading a tiny random-weight model in a UDF of the user's and in an AI function."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from tests.tiny_models import tiny_gpt2

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
BAR = "Loading weights"
AFTER = "=== the job is done"

SCRIPT = f"""
import sys
import pyarrow as pa
import vane

model, backend, imported_first, ask = sys.argv[1:]
if imported_first == "yes":
    import transformers
if ask == "configure":
    vane.configure(model_progress=True)


class Load:
    def __init__(self):
        from transformers import AutoModel

        self.size = AutoModel.from_pretrained(model).config.n_embd

    def __call__(self, batch):
        return pa.table({{"text": batch["text"], "size": [self.size] * batch.num_rows}})


rel = vane.from_pydict({{"text": ["a dog", "a cat"]}})
schema = {{"text": "VARCHAR", "size": "BIGINT"}}
out = rel.map_batches(Load, schema=schema, execution_backend=backend)
out = out.embed_text("text", provider="transformers", model=model, execution_backend=backend)
assert [r["size"] for r in out.to_pylist()] == [32, 32]
print({AFTER!r}, file=sys.stderr, flush=True)
from transformers import AutoModel

AutoModel.from_pretrained(model)  # the user's own load, in the user's own process
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(tiny_gpt2(tmp_path_factory.mktemp("gpt2")))


@pytest.mark.parametrize(
    ("backend", "imported_first", "ask"),
    [
        ("thread", "yes", "no"),
        ("thread", "no", "no"),  # transformers is first imported while a thread actor constructs
        ("subprocess_actor", "no", "no"),
        ("thread", "yes", "configure"),
        ("subprocess_actor", "no", "configure"),
        ("subprocess_actor", "no", "HF_HUB_DISABLE_PROGRESS_BARS=0"),
    ],
)
def test_loading_bars_show_in_workers_only_when_asked(model, backend, imported_first, ask):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    env["PYTHONPATH"] = str(ROOT)
    if "=" in ask:
        name, value = ask.split("=")
        env[name] = value
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, model, backend, imported_first, ask],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    during, after = done.stderr.split(AFTER)
    if ask == "no":
        assert BAR not in during, during
    else:  # two models loaded, by a UDF and an AI function: a bar each
        assert during.count(f"{BAR}: 100%") == 2, during
    assert f"{BAR}: 100%" in after, after  # the user's process is as it was


class BarsOff:
    """Whether model libraries' bars are off where the UDF is constructed."""

    def __init__(self) -> None:
        from huggingface_hub.utils import are_progress_bars_disabled

        self.off = are_progress_bars_disabled()

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"], "off": [self.off] * batch.num_rows})


def bars_off() -> list[bool]:
    out = vane.range(2).map_batches(BarsOff, schema={"id": "BIGINT", "off": "BOOLEAN"})
    return sorted(set(out.to_arrow()["off"].to_pylist()))


@pytest.mark.ray
def test_ray_actors_workers_draw_no_bars_unless_asked(on_ray):
    assert bars_off() == [True]
    vane.configure(model_progress=True)
    try:
        assert bars_off() == [False]
    finally:
        vane.configure(model_progress=False)
