"""The line of the user's code that started an action, where the action's warnings are shown:
the stage that raises one often runs on a thread of DuckDB's or of Ray's, whose stack says
nothing about the user's code.

A warning is said after the work is done (a step's summary of the rows ``on_error`` handled), so
saying it must not fail the action. Python's ``warn_explicit`` looks up the caller's source line
through ``module_globals``'s loader, and the loader of a script given as ``python -c``, on stdin
or typed at the REPL cannot give it (``ImportError: '__main__' is not a built-in module``): such
a warning is shown without its source line. A warnings filter that turns the warning into an
error (``-W error``) is the user's choice, and raises as it would anywhere.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_VANE_DIR = str(Path(__file__).resolve().parents[1])


class Caller:
    """The file, line and globals of the innermost frame outside vane (and contextlib), taken
    on the thread that starts the action."""

    def __init__(self) -> None:
        frame = sys._getframe(1)
        while frame.f_back is not None and (
            frame.f_code.co_filename.startswith(_VANE_DIR)
            or frame.f_code.co_filename == contextmanager.__code__.co_filename
        ):
            frame = frame.f_back
        self.filename = frame.f_code.co_filename
        self.lineno = frame.f_lineno
        self.module_globals: dict[str, Any] = frame.f_globals

    def warn(self, message: str) -> None:
        """A ``UserWarning`` shown at the caller's line, from any thread."""
        registry = self.module_globals.setdefault("__warningregistry__", {})
        where = (self.filename, self.lineno)
        module = self.module_globals.get("__name__")
        try:
            warnings.warn_explicit(
                message,
                UserWarning,
                *where,
                module=module,
                registry=registry,
                module_globals=self.module_globals,
            )
        except Warning:
            raise  # a filter made it an error: the user asked for that
        except Exception:
            # The caller's loader has no source to give (python -c, stdin, the REPL): the
            # lookup failed before anything was shown or recorded, so say it without the line.
            warnings.warn_explicit(message, UserWarning, *where, module=module, registry=registry)
