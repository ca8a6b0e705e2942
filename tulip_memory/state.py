"""The state a checkpointer saves per thread (``tulip.core.state.AgentState``).

``to_checkpoint`` gives plain JSON data and ``from_checkpoint`` reads it back:
``AgentState.from_checkpoint(json.loads(json.dumps(s.to_checkpoint()))) == s``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Message, detached

#: Version of the checkpoint shape written by :meth:`AgentState.to_checkpoint`.
CHECKPOINT_VERSION = 1


class CheckpointFormatError(TulipMemoryError, ValueError):
    """Checkpoint data that is not a state this version can read."""


@dataclass(frozen=True, kw_only=True)
class AgentState:
    """A thread's conversation and the bookkeeping that must survive between runs.

    ``tool_executions`` is the dedup history of tool calls (JSON values by call key);
    ``metadata`` is the application's per-thread data (JSON values).
    """

    messages: Sequence[Message] = ()
    tool_executions: dict[str, Any] = field(default_factory=dict)
    iterations: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))

    def with_messages(self, messages: Sequence[Message]) -> AgentState:
        """A copy of this state holding ``messages`` instead."""
        return dataclasses.replace(self, messages=tuple(messages))

    def to_checkpoint(self, *, encoded: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """Plain JSON data for a checkpointer. ``encoded``: the dicts of this state's
        first messages, made already (a checkpointer's of the messages it saved
        before, :mod:`tulip_memory.delta.known`); the rest are made here."""
        done = len(encoded)
        return {
            "version": CHECKPOINT_VERSION,
            "messages": [*encoded, *(m.to_dict() for m in self.messages[done:])],
            "tool_executions": self.tool_executions,
            "iterations": self.iterations,
            "metadata": self.metadata,
        }

    @classmethod
    def from_checkpoint(cls, data: Mapping[str, Any]) -> AgentState:
        """Inverse of :meth:`to_checkpoint`."""
        version = data.get("version", CHECKPOINT_VERSION)
        if version != CHECKPOINT_VERSION:
            raise CheckpointFormatError(
                f"checkpoint version {version!r} is not readable (expected {CHECKPOINT_VERSION})"
            )
        try:
            return cls(
                messages=tuple(Message.from_dict(m) for m in data.get("messages") or ()),
                tool_executions=detached(data.get("tool_executions")),
                iterations=int(data.get("iterations", 0)),
                metadata=detached(data.get("metadata")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointFormatError(f"malformed checkpoint: {e}") from e
