"""Images made with Pillow on the spot, in the kinds a folder of photos holds: JPEG and PNG of
mixed sizes, a greyscale one, a CMYK JPEG, one whose EXIF says to rotate it, and a corrupt one."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

RED = (255, 0, 0)
BLUE = (0, 0, 255)


def png_bytes(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def pattern(height: int, width: int, seed: int = 0) -> np.ndarray:
    """RGB pixels that differ everywhere, so a wrong stride or a transposition shows."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def write_photos(folder: Path) -> dict[str, Path]:
    """The folder's files by kind (the corrupt one included)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    paths["png"] = folder / "a_small.png"
    Image.fromarray(pattern(6, 9, seed=1)).save(paths["png"])

    paths["jpeg"] = folder / "b_wide.jpg"
    Image.new("RGB", (32, 16), RED).save(paths["jpeg"], quality=95)

    paths["grey"] = folder / "c_grey.png"
    Image.fromarray(np.arange(20, dtype=np.uint8).reshape(4, 5), "L").save(paths["grey"])

    paths["cmyk"] = folder / "d_cmyk.jpg"
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(paths["cmyk"], quality=95)  # red

    # Stored 40 wide and 20 high, left half red, right half blue; EXIF orientation 6 says
    # "rotate 90 degrees clockwise to show": upright it is 20 wide and 40 high, red on top.
    stored = Image.new("RGB", (40, 20), BLUE)
    stored.paste(Image.new("RGB", (20, 20), RED), (0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    paths["rotated"] = folder / "e_rotated.jpg"
    stored.save(paths["rotated"], exif=exif, quality=95)

    paths["corrupt"] = folder / "f_corrupt.jpg"
    paths["corrupt"].write_bytes(b"\xff\xd8\xff\xe0 this is not really a JPEG")
    return paths
