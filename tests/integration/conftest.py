from __future__ import annotations

from collections.abc import Iterator
from threading import Event

import pytest

from tests.integration import udfs


@pytest.fixture
def release_hung() -> Iterator[Event]:
    """Lets the threads of UDFs that hang in this process end once the test is over."""
    udfs.RELEASE.clear()
    yield udfs.RELEASE
    udfs.RELEASE.set()
