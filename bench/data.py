"""The benchmark's inputs, generated from fixed seeds into bench/.data/ (gitignored).

Same arguments, same bytes: every engine in a run, and every run on any machine, reads the same
rows. A file is made once and reused; its name carries the kind, the row count and
``VERSION``, so changing the generator means bumping ``VERSION``, never reusing stale data.

* ``overhead``: ``id BIGINT, text VARCHAR`` with texts of about 40 characters, all distinct.
  Built with Arrow compute in chunks of a million rows, so 20M rows take seconds and little
  memory.
* ``overhead_small_groups``: the same rows as ``overhead`` (which pyarrow writes in row groups
  of a million rows), in row groups of 122,880 rows, the size DuckDB writes by default: the
  memory workload reads both, to tell a cost of the input's size from one of its row groups.
* ``overhead_x10``: a folder of ten links to the ``overhead`` file with a tenth of the rows
  (the large-object store workload: the same pipeline over one object and over ten).
* ``sentences``: ``id BIGINT, text VARCHAR``, sentences of 8 to 30 words drawn from ``WORDS``
  (the embed and prompt workloads).
* ``files``: a folder of ``rows`` Parquet files of two rows each (``id BIGINT, text VARCHAR``):
  the planning workload's folder, where listing and footers cost, not rows.
* ``images``: a folder of JPEGs of mixed sizes (160 to 640 pixels a side; the images
  workload), smooth gradients with noise, so they compress as photos do.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / ".data"
CHUNK = 1_000_000
FOLDERS = {"files", "images", "overhead_x10"}  # kinds that are a folder of files, not one file

_VOCABULARY = """
the a an of to and in on for with by from at as is was are be been this that these those
data model table batch row column query engine stream memory disk network server client
review product price order customer delivery package quality service support team report
market city river mountain forest garden kitchen window door street station train plane
quick slow bright dark quiet loud warm cold fresh old new small large early late simple
careful strange happy tired busy honest gentle brave clever calm eager proud
runs reads writes builds checks moves keeps finds opens closes sends takes gives makes
learns answers carries follows explains measures watches changes grows waits starts stops
today tomorrow yesterday always never often sometimes again soon later here there
because although while after before until since unless whether
"""
WORDS = tuple(_VOCABULARY.split())


def path_for(kind: str, rows: int) -> Path:
    if kind in FOLDERS:
        return DATA_DIR / f"{kind}_{rows}_v{VERSION}"
    return DATA_DIR / f"{kind}_{rows}_v{VERSION}.parquet"


def ensure(kind: str, rows: int) -> Path:
    """The file of ``kind`` with ``rows`` rows, generated if it is not there yet."""
    path = path_for(kind, rows)
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        makers = {
            "overhead": _overhead,
            "overhead_small_groups": _overhead_small_groups,
            "overhead_x10": _overhead_x10,
            "sentences": _sentences,
            "files": _files,
            "images": _images,
        }
        makers[kind](partial, rows)
        os.replace(partial, path)  # a killed run never leaves a half file under the real name
    return path


def _files(path: Path, count: int) -> None:
    if path.exists():  # what a killed run left
        shutil.rmtree(path)
    path.mkdir()
    for i in range(count):
        table = pa.table({"id": pa.array([2 * i, 2 * i + 1], pa.int64()), "text": ["a", "b"]})
        pq.write_table(table, path / f"part-{i:05d}.parquet")


def _phrases(rng: np.random.Generator, count: int, words: int) -> pa.Array:
    picks = rng.integers(0, len(WORDS), size=(count, words))
    return pa.array([" ".join(WORDS[i] for i in row) for row in picks])


def _overhead(path: Path, rows: int) -> None:
    rng = np.random.default_rng(20_240_601)
    # 4,096 phrases of five words (~30 characters), each row gets one plus " #<id>": about 40
    # characters, and no two rows alike, so Parquet cannot dictionary-encode the column away.
    phrases = _phrases(rng, 4_096, 5)
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, CHUNK):
            ids = pa.array(np.arange(start, min(start + CHUNK, rows), dtype=np.int64))
            picks = pa.array(rng.integers(0, len(phrases), size=len(ids)))
            text = pc.binary_join_element_wise(phrases.take(picks), pc.cast(ids, pa.string()), " #")
            writer.write_table(pa.table({"id": ids, "text": text}, schema=schema))


def _overhead_x10(path: Path, rows: int) -> None:
    """Ten objects of the ``overhead`` file with a tenth of the rows, as links to one file:
    the large-object store serves each under its own key (``bench/file_store.py``)."""
    one = ensure("overhead", rows // 10)
    path.mkdir()
    for part in range(10):
        (path / f"part-{part:02d}.parquet").symlink_to(one)


SMALL_ROW_GROUP = 122_880  # DuckDB's default ROW_GROUP_SIZE for COPY ... (FORMAT parquet)


def _overhead_small_groups(path: Path, rows: int) -> None:
    source = pq.ParquetFile(ensure("overhead", rows))
    with pq.ParquetWriter(path, source.schema_arrow) as writer:
        # iter_batches cuts across the source's row groups: every batch but the last is full.
        for batch in source.iter_batches(batch_size=SMALL_ROW_GROUP):
            writer.write_batch(batch, row_group_size=SMALL_ROW_GROUP)


def _sentences(path: Path, rows: int) -> None:
    rng = np.random.default_rng(20_240_602)
    lengths = rng.integers(8, 31, size=rows)
    texts = []
    for length in lengths:
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), size=length)]
        texts.append(" ".join(words).capitalize() + ".")
    table = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "text": pa.array(texts)})
    pq.write_table(table, path)


def _images(path: Path, rows: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(20_261_126)
    path.mkdir(parents=True)
    for i in range(rows):
        width, height = (int(v) for v in rng.integers(160, 641, size=2))
        x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
        y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
        tint = rng.uniform(0.3, 1.0, size=3).astype(np.float32)
        noise = rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
        pixels = np.clip((x * 0.6 + y * 0.4) * tint + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path / f"{i:06d}.jpg", quality=85)


if __name__ == "__main__":
    import sys

    print(ensure(sys.argv[1], int(sys.argv[2])))
