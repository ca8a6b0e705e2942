from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.events import EventLog, recording


@pytest.fixture
def events() -> Iterator[EventLog]:
    """The events emitted during the test."""
    with recording() as log:
        yield log
