"""The bodies of the ``/v1`` API, as the OpenAPI document shows them.

Request models describe the shape a client sends; what each value may be is the
producer's to say (``tulip_wire.events``), so whatever it refuses is refused here
too, with the same reason. Messages are the JSON shape of
:class:`tulip_memory.messages.Message`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tulip_wire.events import MAX_THREAD_ID_CHARS
from tulip_wire.forget import MAX_MESSAGE_IDS

#: The HTTP API's bounds on what travels in a URL: at their worst (every character a
#: 4-byte one, percent-encoded) a query's namespace and text stay well under the 64 KiB
#: request line the server reads.
NAMESPACE_PARTS = 8
PART_CHARS = 256
QUERY_CHARS = 2048
Part = Annotated[str, Field(min_length=1, max_length=PART_CHARS)]
Role = Literal["system", "user", "assistant", "tool"]
View = Literal["full", "compacted"]
EventState = Literal["unknown", "pending", "applied", "superseded", "dead"]
_STRICT = ConfigDict(strict=True, extra="forbid")


class ToolCall(BaseModel):
    model_config = _STRICT
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One message: ``metadata`` may hold an ``id`` and a ``timestamp`` (ISO 8601 or
    epoch seconds), kept with the turn."""

    model_config = _STRICT
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SessionEnded(BaseModel):
    """A session's end: its messages go to memory extraction, in order per namespace."""

    model_config = _STRICT
    namespace: list[Part] = Field(
        min_length=1,
        max_length=NAMESPACE_PARTS,
        description="namespace parts; the first is the credential's tenant",
    )
    thread_id: str = Field(min_length=1, max_length=MAX_THREAD_ID_CHARS)
    messages: list[Message]
    metadata: dict[str, Any] = Field(default_factory=dict)


class Forget(BaseModel):
    """An erase of your tenant's data, ordered with its other events: exactly one of
    ``namespace`` (its memories and turns; with ``message_ids``, only the memories and
    turns of those messages), ``thread_id`` (the thread's checkpoints, summary and
    pending saves) or ``tenant: true`` (everything of the tenant)."""

    model_config = _STRICT
    namespace: list[Part] | None = Field(
        default=None,
        min_length=1,
        max_length=NAMESPACE_PARTS,
        description="namespace parts; the first is the credential's tenant",
    )
    message_ids: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MESSAGE_IDS,
        description="with namespace: only what these messages said",
    )
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID_CHARS)
    tenant: bool = Field(default=False, description="true: erase everything of your tenant")


class AgentState(BaseModel):
    """A thread's whole state (``AgentState.to_checkpoint()``)."""

    model_config = ConfigDict(strict=True, extra="allow")
    messages: list[Message] = Field(default_factory=list)
    tool_executions: dict[str, Any] = Field(default_factory=dict)
    iterations: int = Field(default=0, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class CheckpointSaved(BaseModel):
    """A save: the whole ``state``, or the ``messages`` appended since checkpoint
    ``base`` (with ``iterations``, ``metadata`` and ``tool_executions`` replacing the
    base's when given)."""

    model_config = _STRICT
    state: AgentState | None = None
    base: str | None = Field(default=None, pattern="^[0-9a-f]{32}$")
    messages: list[Message] | None = None
    iterations: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None
    tool_executions: dict[str, Any] | None = None


class Accepted(BaseModel):
    event_id: str = Field(description="ask `GET /v1/events/{event_id}` how it went")


class CheckpointAccepted(Accepted):
    checkpoint_id: str = Field(description="`GET /v1/threads/{id}?checkpoint_id=` loads it")


class Thread(BaseModel):
    """A thread's state (read your writes: the newest save, applied or not)."""

    thread_id: str
    messages: list[dict[str, Any]]
    iterations: int
    metadata: dict[str, Any]
    tool_executions: dict[str, Any]


class Memory(BaseModel):
    type: str
    key: str
    content: str
    metadata: dict[str, Any]


class Memories(BaseModel):
    memories: list[Memory]


class Turn(BaseModel):
    score: float
    turn: dict[str, Any]
    turn_index: int
    text: str
    metadata: dict[str, Any]


class Turns(BaseModel):
    turns: list[Turn]


class EventStatus(BaseModel):
    """``unknown`` for an id this tenant never published (another tenant's included)."""

    event_id: str
    state: EventState
    reason: str | None = None
    memories: int | None = None
    erased: dict[str, int] | None = Field(
        default=None,
        description="an erase's receipt: rows or objects removed per store (no content)",
    )
    erased_at: datetime | None = None


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    database: bool
    broker: bool
