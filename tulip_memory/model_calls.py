"""What every model call shares: the litellm import, which failures are worth a retry,
the provider's ``Retry-After``, and the backoff between attempts.

Extraction, summaries, the compactor's token counts and embeddings all call models
through litellm; they import it and decide about retries here, so the rules cannot
drift apart. Retries are always ours (litellm and the SDKs are asked for none), so
``Retry-After`` is honoured and the cross-worker in-flight bound holds per attempt.

litellm is imported on first use: importing it takes seconds, and ``import tulip_memory``
must stay cheap and offline.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime
from types import ModuleType

#: HTTP statuses worth a retry besides 5xx: request timeout, conflict, rate limit.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: litellm / OpenAI SDK exception classes that mean "try again later".
RETRYABLE_CLASSES = frozenset(
    {
        "RateLimitError",
        "Timeout",
        "APIConnectionError",
        "APITimeoutError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
    }
)

_module: ModuleType | None = None


def import_litellm() -> ModuleType:
    """litellm with its bundled model cost map (it fetches one at import otherwise) and
    without its debug banners in our logs."""
    global _module
    if _module is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        # litellm dumps every base64 embedding response through a pydantic model that
        # declares the vectors lists of floats, and pydantic warns on each: not ours.
        warnings.filterwarnings(
            "ignore",
            message=r"Pydantic serializer warnings:\s+PydanticSerializationUnexpectedValue"
            r"\(Expected `list\[float\]`",
            category=UserWarning,
        )
        _module = litellm
    return _module


async def import_litellm_async() -> ModuleType:
    """:func:`import_litellm` in a worker thread, so an event loop never stalls on it."""
    if _module is not None:
        return _module
    return await asyncio.to_thread(import_litellm)


def is_retryable(error: BaseException) -> bool:
    """Whether a failed call may succeed later: timeouts, connection failures, rate
    limits, 408/409/429 and 5xx."""
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    if any(cls.__name__ in RETRYABLE_CLASSES for cls in type(error).__mro__):
        return True
    status = status_of(error)
    return status is not None and (status in RETRYABLE_STATUSES or status >= 500)


def status_of(error: BaseException) -> int | None:
    """The HTTP status an exception carries, if any."""
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def retry_after_of(error: BaseException) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` / ``Retry-After``), if any.

    litellm exposes the headers on ``error.litellm_response_headers``; errors coming
    through the OpenAI SDK carry an empty ``error.response.headers``."""
    for source in (
        getattr(error, "litellm_response_headers", None),
        getattr(error, "headers", None),
        getattr(getattr(error, "response", None), "headers", None),
    ):
        wait = parse_retry_after(_lower_headers(source))
        if wait is not None:
            return wait
    return None


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds from ``retry-after-ms``, or ``Retry-After`` (seconds or an HTTP date)."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = _finite(lowered.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _finite(raw)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(attempt: int, base: float, cap: float, jitter: float) -> float:
    """Exponential backoff before retry ``attempt`` (1-based), between half and all of
    ``min(cap, base * 2**(attempt-1))``; ``jitter`` in [0, 1]."""
    full = min(cap, base * 2.0 ** (attempt - 1))
    return full * (0.5 + jitter / 2)


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: about four characters a token."""
    return len(text) // 4 + 1


def _lower_headers(source: object) -> dict[str, str]:
    items = getattr(source, "items", None)
    if not callable(items):
        return {}
    return {str(k).lower(): str(v) for k, v in items()}


def _finite(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
