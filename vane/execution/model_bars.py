"""The progress bars model libraries draw (transformers' "Loading weights", huggingface_hub's
downloads), kept out of vane's workers unless asked for.

vane's progress line already says how a job goes; a bar per actor and per model load, drawn by
several processes into one terminal, only breaks that line (and fills a log). Both libraries
take their switch from huggingface_hub: the variable ``HF_HUB_DISABLE_PROGRESS_BARS``, read when
it is imported, or its ``disable_progress_bars()``, which transformers reads when it is imported
and then keeps as a switch of its own.

- A worker process of vane's (a subprocess actor, or the worker a Ray actor hosts) is vane's
  alone: it starts with the variable set (``worker_environment``), so no bar is drawn there,
  whatever the UDF loads and whenever.
- A thread actor runs in the user's process, whose settings are the user's: the bars are turned
  off while its UDF is constructed (where models load), or from the moment the UDF first imports
  huggingface_hub, and back to what they were once the last thread actor constructing has done
  (``quiet_while_constructing``). A model the user's own code loads meanwhile, on another
  thread, loads quietly too.
- ``vane.configure(model_progress=True)`` leaves the libraries alone, and a variable the user set
  is followed as set, in every worker.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from vane.config import get_config

VARIABLE = "HF_HUB_DISABLE_PROGRESS_BARS"
_HUB = "huggingface_hub.utils.tqdm"  # its switches


def worker_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable a worker process starts with: the user's if set (in ``environ``, this
    process's by default), else off unless asked."""
    value = (os.environ if environ is None else environ).get(VARIABLE)
    if value is None:
        value = "0" if get_config().model_progress else "1"
    return {VARIABLE: value}


_lock = threading.Lock()
_constructing = 0  # thread actors constructing their UDF now
_restore: Callable[[], None] | None = None


@contextmanager
def quiet_while_constructing() -> Iterator[None]:
    """No model library's bars in this process while the block runs (see the module's text)."""
    if VARIABLE in os.environ or get_config().model_progress:
        yield
        return
    global _constructing, _restore
    with _lock:
        if _constructing == 0:
            _restore = _quiet()
        _constructing += 1
    try:
        yield
    finally:
        with _lock:
            _constructing -= 1
            if _constructing == 0 and _restore is not None:
                _restore()
                _restore = None


def _quiet() -> Callable[[], None]:
    """Turn the bars off; return what turns them back as they were."""
    hub = sys.modules.get(_HUB)
    if hub is not None:
        return _turn_off(hub, sys.modules.get("transformers.utils.logging"))
    # Not imported yet, and importing it costs ~0.2 s (tqdm, asyncio) that a UDF without a
    # model should not pay. A UDF that imports it as it is constructed has it turned off then.
    finder = _TurnOffOnImport()
    sys.meta_path.insert(0, finder)

    def restore() -> None:
        sys.meta_path.remove(finder)
        finder.restore()

    return restore


def _turn_off(hub: Any, transformers: Any) -> Callable[[], None]:
    """Turn off the bars of huggingface_hub (its module ``hub``) and, if it has been imported,
    transformers (its ``transformers.utils.logging``, or None); return what turns them back as
    they were."""
    if hub.are_progress_bars_disabled():
        return _nothing
    # Its switches by group of bars ("huggingface_hub.http_get"...), which turning all of them
    # off clears: put back as they were.
    states = getattr(hub, "progress_bar_states", None)
    saved = dict(states) if states is not None else None
    transformers_on = transformers is None or transformers.is_progress_bar_enabled()
    hub.disable_progress_bars()
    if transformers is not None:
        transformers.disable_progress_bar()

    def restore() -> None:
        # transformers imported meanwhile took the hub's switch as it was then (off); it would
        # have taken it on.
        imported = sys.modules.get("transformers.utils.logging")
        if imported is not None and transformers_on:
            imported.enable_progress_bar()
        if states is not None and saved is not None:
            states.clear()
            states.update(saved)
        else:
            hub.enable_progress_bars()

    return restore


def _nothing() -> None:
    pass


class _TurnOffOnImport(MetaPathFinder):
    """An import hook: once huggingface_hub's tqdm module has run, turn its bars off."""

    def __init__(self) -> None:
        self.restore: Callable[[], None] = _nothing

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if name != _HUB:
            return None
        for finder in sys.meta_path:  # the finder that would have found it
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                self._turn_off_when_run(spec.loader)
                return spec
        return None

    def _turn_off_when_run(self, loader: Loader) -> None:
        run = loader.exec_module

        def run_then_turn_off(module: ModuleType) -> None:
            run(module)
            # transformers, if it is what imports huggingface_hub, is not yet: it reads the
            # switch once it is.
            try:
                self.restore = _turn_off(module, None)
            except Exception:  # another version's switches: its bars show, its import works
                self.restore = _nothing

        loader.exec_module = run_then_turn_off  # type: ignore[method-assign]
