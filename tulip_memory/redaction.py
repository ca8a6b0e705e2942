"""Reasons fit for a global table or a log line: an error's class, length and hash.

A failure's text may quote what a model returned (the user's conversation) or the
event itself; only the tenant's dead-letter row keeps it whole. Everywhere else (the
event ledger, ``Reader.status``, every log line) carries :func:`redact`'s form, which
still tells failures apart and matches a dead letter's full reason by its hash.
"""

from __future__ import annotations

import hashlib
import re
import traceback

_CLASS = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?=:)")

#: The same form in SQL, for reasons stored before redaction (a migration rewrites them).
REDACT_SQL = (
    "coalesce(substring({r} from '^[A-Za-z_][A-Za-z0-9_.]*(?=:)'), 'error') || ' (' || "
    "length({r}) || ' chars, sha256:' || "
    "left(encode(sha256(convert_to({r}, 'UTF8')), 'hex'), 12) || ')'"
)


def redact(reason: str) -> str:
    """``"ExtractionError (212 chars, sha256:3f2a9c0d1e4b)"``: the class before the
    first colon (``error`` without one), the length and a short sha256 of ``reason``."""
    found = _CLASS.match(reason)
    digest = hashlib.sha256(reason.encode()).hexdigest()[:12]
    return f"{found.group(0) if found else 'error'} ({len(reason)} chars, sha256:{digest})"


def failure(error: BaseException) -> str:
    """A swallowed error as a log line may carry it: :func:`redact`'s form of
    ``"Class: message"`` and the frames of its traceback (file, line, function and
    source line: code, never data), without the message, which may quote a model's
    output or the conversation."""
    frames = "".join(traceback.format_tb(error.__traceback__))
    head = redact(f"{type(error).__name__}: {error}")
    return f"{head}\nTraceback (most recent call last):\n{frames}".rstrip()
