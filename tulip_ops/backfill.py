"""Loading history through the live pipeline: ``tulip-memory import FILE``.

The file is JSON Lines, one conversation a line::

    {"namespace": ["acme", "users", "u42"], "thread_id": "t-7",
     "sessions": [{"timestamp": "2023-05-08T13:56:00Z", "metadata": {...},
                   "messages": [{"role": "user", "content": "...", "name": "Maya",
                                 "id": "m1", "timestamp": "2023-05-08T13:57:10Z"}, ...]}]}

Each session becomes one ``session.ended`` event, published in file order (so in order
per namespace) through the ordinary producer to the ordinary shard queues, where the
workers apply it like a live one. A message's ``id`` and ``timestamp`` (or the same keys
in its ``metadata``) are its own; the session's ``timestamp`` is its time otherwise.

- **Live traffic first.** Before publishing, the import waits until the shard queue
  of the event holds fewer than ``max_backlog`` events, so a live event never queues
  behind more than that many imported ones; ``rate`` caps events per second on top.
- **Exactly once, resumable.** An event's id is a digest of its namespace, thread,
  position and content, so the same history imported twice is the same events, and
  the workers' ledger applies each once. The position reached is saved to a state file
  beside the input (every second, when the run ends, and on Ctrl-C); a new run starts
  there (so lines appended later are imported by running it again), and what a crash
  published after the last save is published again under the same ids: applied once.
- A line that is not a conversation is reported (line number, reason) and skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from tulip_memory.messages import Message
from tulip_memory.times import TIME_FIELD
from tulip_wire.events import Envelope, EventError, session_ended
from tulip_wire.events import namespace_key as _namespace_key

#: Progress is saved at most this often (and when the run stops).
SAVE_EVERY = 1.0
#: Waits while the shard queue is full, and while the broker cannot be reached.
POLL = 0.05
MAX_POLL = 2.0
MAX_LINE_BYTES = 64 * 1024 * 1024


class Publisher(Protocol):
    """What the import needs of :class:`~tulip_producer.Producer`."""

    def publish_session(self, env: Envelope) -> str: ...

    def backlog(self, namespace: tuple[str, ...]) -> int: ...


class LineError(ValueError):
    """A line of the file that is not a conversation."""


@dataclass(frozen=True)
class Conversation:
    namespace: tuple[str, ...]
    thread_id: str
    sessions: list[dict[str, Any]]


@dataclass
class Position:
    """The next event to publish: session ``session`` of line ``line`` (1-based),
    whose text starts at byte ``offset``."""

    line: int = 1
    session: int = 0
    offset: int = 0


@dataclass
class Summary:
    conversations: int = 0
    events: int = 0
    messages: int = 0
    skipped_events: int = 0  # published by an earlier run (resumed past them)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    waited: float = 0.0  # seconds spent waiting for the shard queues
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        return self.events / self.elapsed if self.elapsed > 0 else 0.0


def parse_line(text: str) -> Conversation:
    """One conversation; :class:`LineError` says what is wrong with it."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise LineError(f"not JSON: {e}") from e
    if not isinstance(raw, dict):
        raise LineError("a line must be a JSON object")
    ns, thread, sessions = raw.get("namespace"), raw.get("thread_id"), raw.get("sessions")
    if not isinstance(ns, list) or not ns or not all(isinstance(p, str) for p in ns):
        raise LineError("namespace must be a non-empty list of strings")
    if not isinstance(thread, str) or not thread:
        raise LineError("thread_id must be a non-empty string")
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise LineError("sessions must be a list of objects")
    for i, session in enumerate(sessions):
        if not isinstance(session.get("messages"), list):
            raise LineError(f"sessions[{i}].messages must be a list")
    return Conversation(tuple(ns), thread, sessions)


def session_event(conv: Conversation, index: int, *, ts: float) -> Envelope:
    """The event of session ``index``, with its id derived from what it holds."""
    session = conv.sessions[index]
    metadata = dict(session.get("metadata") or {})
    if session.get("timestamp") is not None:
        metadata[TIME_FIELD] = session["timestamp"]
    messages = [_message(m) for m in session["messages"]]
    try:
        env = session_ended(conv.namespace, conv.thread_id, messages, metadata, ts=ts)
    except (EventError, TypeError, ValueError, KeyError, AttributeError) as e:
        raise LineError(f"sessions[{index}]: {e}") from e
    return replace(env, id=event_id(conv, index, env.payload or {}))


def event_id(conv: Conversation, index: int, payload: Mapping[str, Any]) -> str:
    """32 hex digits of a digest of the event's place and content."""
    digest = hashlib.blake2b(digest_size=16, person=b"tulip-import")
    for part in (_namespace_key(conv.namespace), conv.thread_id, str(index)):
        digest.update(part.encode("utf-8") + b"\x1e")
    digest.update(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def _message(raw: Any) -> dict[str, Any]:
    """A message of the file: ``id`` and ``timestamp`` beside ``role`` go to metadata."""
    if not isinstance(raw, dict):
        raise LineError("a message must be an object")
    metadata = dict(raw.get("metadata") or {})
    for name in ("id", TIME_FIELD):
        if raw.get(name) is not None:
            metadata.setdefault(name, raw[name])
    try:
        return Message.from_dict({**raw, "metadata": metadata}).to_dict()
    except (KeyError, TypeError, ValueError) as e:
        raise LineError(f"not a message: {e!r}") from e


# -- the state file ---------------------------------------------------------------


class StateFile:
    """Where a run got to, for the next run on the same input (written atomically)."""

    def __init__(self, path: Path, source: Path) -> None:
        self.path = path
        self._fingerprint = _fingerprint(source)

    def load(self) -> Position:
        if not self.path.exists():
            return Position()
        data = json.loads(self.path.read_text())
        if data.get("fingerprint") != self._fingerprint:
            raise LineError(
                f"{self.path} belongs to another input file (its first 64 KiB differ); "
                "remove it to import from the start"
            )
        return Position(**data["position"])

    def save(self, position: Position, summary: Summary) -> None:
        data = {
            "fingerprint": self._fingerprint,
            "position": asdict(position),
            "events": summary.events + summary.skipped_events,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


def _fingerprint(source: Path) -> str:
    with source.open("rb") as f:
        return hashlib.sha256(f.read(64 * 1024)).hexdigest()


# -- pacing -------------------------------------------------------------------------


@dataclass
class Pacer:
    """Holds each publish until its shard queue has room and the rate allows it."""

    publisher: Publisher
    max_backlog: int = 2
    rate: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    on_wait: Callable[[str], None] = lambda why: None
    _next: float = 0.0

    def __post_init__(self) -> None:
        if self.max_backlog < 1:
            raise ValueError(f"max_backlog must be >= 1, got {self.max_backlog}")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")

    def wait(self, namespace: tuple[str, ...]) -> float:
        """Block until an event of ``namespace`` may go; returns the seconds waited."""
        started, delay = self.clock(), POLL
        if self.rate is not None:
            self.sleep(max(0.0, self._next - started))
        while True:
            try:
                if self.publisher.backlog(namespace) < self.max_backlog:
                    break
            except Exception as e:  # the broker is away: wait for it, say so
                self.on_wait(f"broker unreachable ({type(e).__name__}); waiting")
                delay = MAX_POLL
            self.sleep(delay)
            delay = min(2 * delay, MAX_POLL)
        now = self.clock()
        if self.rate is not None:
            self._next = max(now, self._next) + 1 / self.rate
        return now - started


# -- the run ----------------------------------------------------------------------


Progress = Callable[[Position, Summary], None]


@dataclass(frozen=True)
class Line:
    number: int
    offset: int  # where the line starts (bytes)
    end: int  # where the next one starts
    text: str


def lines_from(path: Path, start: Position) -> Iterator[Line]:
    """The lines of ``path`` from ``start`` on."""
    with path.open("rb") as f:
        f.seek(start.offset)
        number, offset = start.line, start.offset
        while raw := f.readline(MAX_LINE_BYTES + 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise LineError(f"line {number} is longer than {MAX_LINE_BYTES} bytes")
            yield Line(number, offset, offset + len(raw), raw.decode("utf-8", errors="replace"))
            number, offset = number + 1, offset + len(raw)


def run(
    source: Path,
    publisher: Publisher,
    state: StateFile,
    pacer: Pacer,
    progress: Progress = lambda position, summary: None,
    clock: Callable[[], float] = time.monotonic,
) -> Summary:
    """Publish every session of ``source`` from where ``state`` says; returns the
    summary. Progress is saved on the way out whatever stops the run (Ctrl-C)."""
    summary, started = Summary(), clock()
    start = state.load()
    summary.skipped_events = _already(state)
    position, last_save = start, clock()
    try:
        for line in lines_from(source, start):
            first = start.session if line.number == start.line else 0
            position = Position(line.number, first, line.offset)
            for index, namespace, env, count in _events(line, first, summary):
                summary.waited += pacer.wait(namespace)
                publisher.publish_session(env)
                summary.events += 1
                summary.messages += count
                position = Position(line.number, index + 1, line.offset)
                if clock() - last_save >= SAVE_EVERY:
                    state.save(position, summary)
                    last_save = clock()
                progress(position, summary)
            position = Position(line.number + 1, 0, line.end)
            progress(position, summary)
    finally:
        state.save(position, summary)
        summary.elapsed = clock() - started
    return summary


def _events(
    line: Line, first: int, summary: Summary
) -> Iterator[tuple[int, tuple[str, ...], Envelope, int]]:
    """The events of one line from session ``first`` on; what is not valid is counted."""
    if not line.text.strip():
        return
    try:
        conv = parse_line(line.text)
    except LineError as e:
        summary.bad_lines.append((line.number, str(e)))
        return
    summary.conversations += 1
    for index in range(first, len(conv.sessions)):
        try:
            env = session_event(conv, index, ts=time.time())
        except LineError as e:
            summary.bad_lines.append((line.number, str(e)))
            continue
        yield index, conv.namespace, env, len(conv.sessions[index]["messages"])


def _already(state: StateFile) -> int:
    if not state.path.exists():
        return 0
    return int(json.loads(state.path.read_text()).get("events", 0))
