"""Record the events the library emits, through its public ``subscribe`` hook."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.events import subscribe


@dataclass
class EventLog:
    """Every event received, in order, as ``(name, fields)``."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, name: str, fields: Mapping[str, Any]) -> None:
        self.events.append((name, dict(fields)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [fields for n, fields in self.events if n == name]


@contextmanager
def recording() -> Iterator[EventLog]:
    log = EventLog()
    unsubscribe = subscribe(log)
    try:
        yield log
    finally:
        unsubscribe()
