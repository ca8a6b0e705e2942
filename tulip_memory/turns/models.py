"""The shapes turn recall hands out, and the one place a turn's text is read.

A turn mirrors the PermanentHistory shape:
``{"role": str, "content": [{"type": "text", "text": str}], "timestamp": float,
"metadata": dict}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tulip_memory.turns.errors import InvalidTurnError


class Entry(NamedTuple):
    """Storage tuple yielded by ``TurnVectorStore.iter_entries``.

    Fields mirror what was passed to ``add()``; ``Memory.reindex`` and
    ``persist_store`` read a store's contents through them.
    """

    text: str
    """The plain text that was embedded."""
    embedding: list[float]
    """The float vector returned by the embedding backend."""
    turn: dict[str, Any]
    """The raw turn dict."""
    metadata: dict[str, Any]
    """The caller-provided metadata dict."""


@dataclass(frozen=True, slots=True)
class TurnHit:
    """A single ranked result returned by ``TurnVectorStore.search``.

    ``score`` is the cosine similarity in [-1.0, 1.0]; ``turn_index`` the entry's
    position in the store at search time; ``text`` the string that was embedded;
    ``metadata`` the caller's metadata, always a dict (possibly empty).
    """

    score: float
    turn: dict[str, Any]
    turn_index: int
    text: str
    metadata: dict[str, Any]


def turn_text(turn: Mapping[str, Any]) -> str:
    """``turn["content"][0]["text"]``, or :class:`InvalidTurnError` saying what is missing."""
    content = turn.get("content") if isinstance(turn, Mapping) else None
    if not isinstance(content, Sequence) or isinstance(content, str) or not content:
        raise InvalidTurnError("turn['content'] must be a non-empty list of content blocks")
    first = content[0]
    text = first.get("text") if isinstance(first, Mapping) else None
    if not isinstance(text, str):
        raise InvalidTurnError("turn['content'][0]['text'] must be a string")
    return text
