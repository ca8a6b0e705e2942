"""The ``fake_openai`` pytest fixture; registered through ``pytest_plugins`` in conftest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.openai_server import FakeOpenAI


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started :class:`FakeOpenAI`, stopped (threads joined) after the test."""
    with FakeOpenAI() as server:
        yield server
