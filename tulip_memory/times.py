"""The time a caller gave a message, and the one rule for finding it.

A message's time is, in order: its own ``metadata["timestamp"]``, else the session's
(the event's ``metadata["timestamp"]``), else the time the event was published. A time
is epoch seconds (a number) or an ISO 8601 string (without an offset it is UTC),
between 1970 and the year 3000; anything else is refused when the event is built or
decoded, so a worker never guesses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

#: The metadata field holding a time, on a message and on a session's event.
TIME_FIELD = "timestamp"
#: 3000-01-01T00:00:00Z: later than any conversation, earlier than overflow.
MAX_EPOCH = 32503680000.0


def parse_time(value: Any) -> float:
    """Epoch seconds of ``value`` (a number or an ISO 8601 string); ValueError if not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        ts = float(value)
    elif isinstance(value, str) and 0 < len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError as e:
            raise ValueError(f"not an ISO 8601 time: {value!r}") from e
        ts = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    else:
        raise ValueError(f"not a time (epoch seconds or ISO 8601): {value!r}")
    if not math.isfinite(ts) or not 0 <= ts <= MAX_EPOCH:
        raise ValueError(f"time out of range (1970 to 3000): {value!r}")
    return ts


def stated_time(metadata: Mapping[str, Any]) -> float | None:
    """The time ``metadata`` states, if any (ValueError for one that is not a time)."""
    value = metadata.get(TIME_FIELD)
    return None if value is None else parse_time(value)


def caller_time(message: Mapping[str, Any], session: float | None, published: float) -> float:
    """A message's time by the module's rule; ``message`` is its metadata."""
    own = stated_time(message)
    if own is not None:
        return own
    return published if session is None else session


def iso(ts: float) -> str:
    """``ts`` as an ISO 8601 UTC string."""
    return datetime.fromtimestamp(ts, UTC).isoformat()
