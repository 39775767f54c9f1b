"""Atomic commit of written files: everything is written into a staging directory beside the
destination (same filesystem, so ``rename`` is atomic), then moved into place only on success.

- ``error``: the destination must not exist (an empty directory is fine); the staging directory is
  renamed to it.
- ``overwrite``: the old destination is renamed aside, the staging directory renamed into its
  place, and only then the old one deleted; if the swap fails the old one is put back.
- ``append``: each new file (names are unique per write) is renamed into the destination; if a
  rename fails, those already made are undone.

On any failure, or an interrupt, the staging directory is removed and the destination is exactly as
it was.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from vane.errors import ConfigurationError, SinkError

WriteMode = Literal["error", "overwrite", "append"]
MODES = ("error", "overwrite", "append")


def _exists_with_content(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists()


class Staging:
    """A staging directory for one write; ``commit`` moves its files into ``destination``."""

    def __init__(self, destination: Path, mode: WriteMode, *, single_file: bool) -> None:
        if mode not in MODES:
            raise ConfigurationError(f"mode={mode!r} is not one of {', '.join(MODES)}")
        self.destination = destination
        self.mode = mode
        self.single_file = single_file
        self.token = uuid.uuid4().hex[:12]
        self._check_destination()
        destination.parent.mkdir(parents=True, exist_ok=True)
        self.directory = destination.parent / f".{destination.name}.vane-staging-{self.token}"
        self.directory.mkdir()

    def _check_destination(self) -> None:
        dest = self.destination
        if self.mode == "error" and _exists_with_content(dest):
            raise SinkError(
                f"{str(dest)!r} already exists. Pass mode='overwrite' to replace it"
                + ("" if self.single_file else ", or mode='append' to add files to it")
            )
        if self.mode == "append":
            if self.single_file:
                raise SinkError(
                    f"mode='append' adds files to a directory, but {str(dest)!r} names a single "
                    "file. Write to a directory path instead, such as 'out/'"
                )
            if dest.exists() and not dest.is_dir():
                raise SinkError(f"mode='append' needs a directory, but {str(dest)!r} is a file")
        if not self.single_file and dest.is_file() and self.mode != "overwrite":
            raise SinkError(f"{str(dest)!r} is a file; writing needs a directory path")

    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.rglob("*") if p.is_file())

    def commit(self) -> Path:
        """Move the staged files into place; returns the destination."""
        dest = self.destination
        try:
            if self.single_file:
                (staged,) = self.files()
                if dest.is_dir():
                    self._swap_aside(dest, lambda: os.replace(staged, dest))
                elif self.mode == "error":
                    # link() refuses an existing name, so a file that appeared meanwhile is
                    # never replaced; the staged name goes with the staging directory.
                    try:
                        os.link(staged, dest)
                    except FileExistsError:
                        raise SinkError(
                            f"{str(dest)!r} appeared while writing; nothing was changed"
                        ) from None
                else:
                    os.replace(staged, dest)
            elif self.mode == "append" and dest.is_dir():
                self._append(dest)
            elif _exists_with_content(dest) or dest.is_file():
                if self.mode == "error":
                    raise SinkError(f"{str(dest)!r} appeared while writing; nothing was changed")
                self._swap_aside(dest, lambda: os.rename(self.directory, dest))
            else:
                if dest.is_dir():
                    dest.rmdir()  # an empty directory is replaced
                os.rename(self.directory, dest)
        except OSError as exc:
            raise SinkError(f"cannot move the written files into {str(dest)!r}: {exc}") from exc
        finally:
            self.abort()
        return dest

    def _append(self, dest: Path) -> None:
        """Move each new file in; if one move fails, move back those already moved."""
        moved: list[tuple[Path, Path]] = []
        try:
            for staged in self.files():
                target = dest / staged.relative_to(self.directory)
                if target.exists():
                    raise FileExistsError(f"{target} exists")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(staged, target)
                moved.append((staged, target))
        except BaseException:
            for staged, target in reversed(moved):
                os.rename(target, staged)
            raise

    def _swap_aside(self, dest: Path, put_new: Callable[[], None]) -> None:
        old = dest.parent / f".{dest.name}.vane-old-{self.token}"
        os.rename(dest, old)
        try:
            put_new()
        except BaseException:
            os.rename(old, dest)
            raise
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)

    def abort(self) -> None:
        """Remove the staging directory and whatever was written into it."""
        shutil.rmtree(self.directory, ignore_errors=True)
