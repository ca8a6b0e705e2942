"""Chat messages (``tulip.core.messages``): roles, tool calls, and one message.

Messages are frozen; ``to_dict`` / ``from_dict`` give the JSON shape checkpoints and
events carry. Sequences passed in (``tool_calls``) are stored as tuples.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """Who said a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


_ROLES: dict[object, Role] = {**{r.value: r for r in Role}, **{r: r for r in Role}}
_CONTAINERS = (dict, list)


def detached(mapping: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``mapping`` that shares none of its dicts or lists with it, however
    deep: an object built from a loaded checkpoint may be changed in place by its
    caller without changing what it was built from (a checkpointer's cached history).
    The common case, scalars only, costs a copy and one scan of the values (~0.2 us
    for a message's id and time). Nested values are copied by a ``marshal`` round trip,
    in C and as deep as the JSON parser nests (``copy.deepcopy`` recurses in Python and
    fails past ~500 levels); values it cannot carry (an application's own objects) by
    ``copy.deepcopy``."""
    if not mapping:
        return {}
    for value in mapping.values():
        if isinstance(value, _CONTAINERS):
            try:
                copied: dict[str, Any] = marshal.loads(marshal.dumps(dict(mapping)))  # noqa: S302
            except ValueError:
                return copy.deepcopy(dict(mapping))
            return copied
    return dict(mapping)


def _role(value: str) -> Role:
    """``Role(value)``, without the enum machinery for the values a role takes."""
    found = _ROLES.get(value) if isinstance(value, str) else None
    return found if found is not None else Role(value)


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A model's request to call tool ``name`` with JSON ``arguments``."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of this call."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolCall:
        """Inverse of :meth:`to_dict`."""
        return cls(id=d["id"], name=d["name"], arguments=detached(d.get("arguments")))


@dataclass(frozen=True, kw_only=True)
class Message:
    """One turn of a conversation.

    ``tool_calls`` is set on assistant messages that call tools; ``tool_call_id`` on
    the tool message answering one of them. ``metadata`` is for the application and
    for markers of our own (such as an injected memory block); it is never sent to a
    model.
    """

    role: Role
    content: str = ""
    tool_calls: Sequence[ToolCall] = ()
    tool_call_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Loading a long thread builds every message: skip the conversions that the
        # usual arguments (a Role, a tuple) do not need.
        if type(self.role) is not Role:
            object.__setattr__(self, "role", _role(self.role))
        if type(self.tool_calls) is not tuple:
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of this message (every field, so it round-trips exactly)."""
        return {
            "role": self.role.value,
            "content": self.content,
            "tool_calls": [tc.to_dict() for tc in self.tool_calls],
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`; absent optional fields take their defaults.

        Loading a long thread builds every one of its messages, so this fills the
        fields directly (a frozen dataclass's ``__init__`` sets each through
        ``object.__setattr__``): the same values ``__init__`` and ``__post_init__``
        would give, 3x faster."""
        calls = d.get("tool_calls")
        message = object.__new__(cls)
        message.__dict__.update(
            role=_role(d["role"]),
            content=d.get("content") or "",
            tool_calls=tuple(ToolCall.from_dict(tc) for tc in calls) if calls else (),
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
            metadata=detached(d.get("metadata")),
        )
        return message


#: Metadata fields that may carry a message's own id, the first one set wins.
MESSAGE_ID_FIELDS = ("id", "message_id")


def message_id(message: Message) -> str | None:
    """The id the application gave ``message`` (``metadata["id"]`` or
    ``metadata["message_id"]``, a string or an integer), if any."""
    for name in MESSAGE_ID_FIELDS:
        value = message.metadata.get(name)
        if isinstance(value, str) and value:
            return value[:256]
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None
