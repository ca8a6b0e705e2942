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


class DatabaseUnreachable(TulipMemoryError, ConnectionError):
    """Postgres did not answer at ``where`` (the DSN without its credentials): refused,
    timed out, no such host, or no server socket where the DSN points (a stopped
    stack). ``setting`` names the variable the DSN came from, when the caller knows it.
    A :class:`ConnectionError`, so handlers of the network error keep catching it."""

    def __init__(self, where: str, cause: OSError, setting: str | None = None) -> None:
        self.where = where
        self.setting = setting
        reason = cause.strerror or str(cause) or type(cause).__name__
        if isinstance(cause, FileNotFoundError):
            reason = f"no server socket there ({reason}): is the server running?"
        named = f" ({setting})" if setting else ""
        super().__init__(f"cannot reach Postgres at {where}{named}: {reason}")

    def named(self, setting: str) -> DatabaseUnreachable:
        """The same error naming the variable its DSN came from."""
        cause = self.__cause__ if isinstance(self.__cause__, OSError) else OSError(str(self))
        error = DatabaseUnreachable(self.where, cause, setting)
        error.__cause__ = self.__cause__
        return error
