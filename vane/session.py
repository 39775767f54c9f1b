"""``vane.configure``: the settings recorded (``vane.config``), then the runner that needs a
connection connected.

The settings live at the bottom of the package, where every layer reads them; connecting to a
Ray cluster needs the Ray runner, at the top. So the verb users call is assembled here, above
both: ``vane.config.configure`` checks and records, this module connects ``runner="ray"`` (on
the cluster this process is connected to, else ``address``, else a new local one) and, if the
connection fails, puts the settings back as they were, so a failed call changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec

from vane import config
from vane.config import Config

P = ParamSpec("P")


def _connecting(record: Callable[P, Config]) -> Callable[P, Config]:
    @functools.wraps(record)
    def configure(*args: P.args, **kwargs: P.kwargs) -> Config:
        before = config.get_config()
        recorded = record(*args, **kwargs)
        if kwargs.get("runner") == "ray":
            from vane.execution.ray.cluster import connect  # needs the `ray` extra

            address: Any = kwargs.get("address")
            init = {key: value for key, value in kwargs.items() if key not in config.SETTINGS}
            init.pop("address", None)
            try:
                connect(address, init)
            except BaseException:
                config.restore(before)
                raise
        return recorded

    return configure


configure = _connecting(config.configure)
