"""Seed-style embedding backends for the turn recall tests, and a turn builder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def make_turn(text: str, role: str = "assistant", timestamp: float = 1.0) -> dict[str, Any]:
    """A turn in the PermanentHistory shape the seed documents."""
    return {
        "role": role,
        "content": [{"type": "text", "text": text}],
        "timestamp": timestamp,
        "metadata": {},
    }


class TableBackend:
    """A seed-style ``EmbeddingBackend``: ``list[list[float]]`` looked up in a table.

    Records every batch it is asked for, sync and async apart, so tests can tell
    which entry point ran and what text was embedded.
    """

    def __init__(self, table: Mapping[str, list[float]]) -> None:
        self.table = dict(table)
        self.sync_calls: list[list[str]] = []
        self.async_calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.sync_calls.append(list(texts))
        return [list(self.table[text]) for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        self.async_calls.append(list(texts))
        return [list(self.table[text]) for text in texts]

    @property
    def calls(self) -> int:
        return len(self.sync_calls) + len(self.async_calls)


class FixedAnswerBackend:
    """Answers every batch with the same value, however wrong it is for the request."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def embed(self, texts: list[str]) -> Any:
        return self.answer

    async def aembed(self, texts: list[str]) -> Any:
        return self.answer


class FailingBackend:
    """Raises on every call, as a provider outage would."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding provider unreachable")

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding provider unreachable")
