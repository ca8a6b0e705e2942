"""One shallow error tree under :class:`TulipMemoryError`.

Errors carry the data a caller needs to branch on (``capability``, ``hint``, ...);
foreign errors are wrapped with ``raise ... from e``.
"""

from __future__ import annotations


class TulipMemoryError(Exception):
    """Root of every error this package raises on purpose."""


class StoreCapabilityError(TulipMemoryError, NotImplementedError):
    """A store operation the backend does not support.

    Subclasses :class:`NotImplementedError` so ``except NotImplementedError``
    blocks written against the SDK keep catching it.
    """

    def __init__(self, capability: str, store_class: str, hint: str | None = None) -> None:
        self.capability = capability
        self.store_class = store_class
        self.hint = hint
        msg = f"{store_class} does not support {capability!r}"
        if hint:
            msg = f"{msg}. {hint}"
        super().__init__(msg)


class TenantIsolationError(TulipMemoryError, PermissionError):
    """A connection or call that would let one tenant reach another's rows."""


class SchemaError(TulipMemoryError, RuntimeError):
    """A table that is not at this code's schema version (run provisioning)."""


class ModelCallError(TulipMemoryError):
    """A model call that failed for good: ``reason``, after ``attempts`` calls (and
    the HTTP ``status`` of the last, when there was one)."""

    def __init__(self, reason: str, *, attempts: int, status: int | None = None) -> None:
        self.reason = reason
        self.attempts = attempts
        self.status = status
        super().__init__(f"{reason} (after {attempts} attempt(s))")


class EmbeddingError(TulipMemoryError):
    """An embedder failed or returned vectors that cannot be used."""
