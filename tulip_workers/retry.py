"""In-place retry policy of ordered tasks: which errors are worth another attempt,
and how long to wait. Never ``task.retry()`` on an ordered queue: that re-publishes
the event to the tail, behind later events of its key."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tulip_wire.events import EventError

_rng = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base: float = 0.5
    cap: float = 20.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base < 0 or self.cap < self.base:
            raise ValueError(f"invalid retry policy {self}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Exponential backoff with equal jitter before attempt ``attempt + 1``."""
        backoff = min(self.cap, self.base * 2 ** (attempt - 1))
        source: random.Random = rng or _rng
        return float(backoff / 2 + source.uniform(0, backoff / 2))


def is_permanent(error: BaseException) -> bool:
    """Errors no retry can fix: the event itself is wrong, a model's answer that cannot
    be used (an error class marked ``permanent``: asking again is another paid call),
    or arithmetic and nesting no attempt computes otherwise."""
    if isinstance(error, EventError | OverflowError | RecursionError):
        return True
    return getattr(type(error), "permanent", False) is True


def describe(error: BaseException) -> str:
    """A one-line reason for the ledger and the dead letter."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:500]
