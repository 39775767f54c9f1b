from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Nothing may come from a model hub: models come from installed packages (see tests/models.py),
# laid out as an offline hub cache before any test imports huggingface_hub. Worker processes
# inherit these variables.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_HF_HOME = Path(tempfile.mkdtemp(prefix="vane-tests-hf-"))
os.environ["HF_HOME"] = str(_HF_HOME)


def pytest_configure(config: pytest.Config) -> None:
    from tests.models import install_minilm_in_hub_cache

    install_minilm_in_hub_cache(_HF_HOME)


@pytest.fixture(autouse=True)
def _quiet_progress():
    import vane

    vane.configure(progress=False)
