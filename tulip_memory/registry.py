"""String-based checkpointer lookup (``tulip.memory.registry``).

Used when configuration passes a provider name instead of an instance. Format:
``"provider"`` or ``"provider:config_hint"``, split at the first colon; the hint is
passed to the provider's factory as the keyword ``config_hint``, with any other
keyword arguments. Built in:

- ``"memory"``: a :class:`~tulip_memory.delta.DeltaCheckpointer` in process memory;
- ``"file:./dir"`` (or ``"file:///abs/dir"``): delta checkpoints under a directory;
- ``"s3:bucket"``, ``"s3:bucket/prefix"`` (or ``"s3://bucket/prefix"``): on any S3 API;
  ``endpoint_url=`` selects it, else ``TULIP_S3_ENDPOINT_URL``, else AWS.

Other packages add providers with :func:`register_checkpointer`, or declare them as
entry points in the ``tulip_memory.checkpointers`` group (loaded on first lookup
miss). A wrapping provider receives the rest of the string as its hint, so
``"queued:s3:bucket/prefix"`` reaches a ``"queued"`` factory with
``config_hint="s3:bucket/prefix"``, which it can resolve with :func:`get_checkpointer`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from tulip_memory import providers
from tulip_memory.backends.s3 import S3Backend
from tulip_memory.delta import DeltaCheckpointer, FileDeltaStorage
from tulip_memory.providers import (
    ENTRY_POINT_GROUP,
    BaseCheckpointer,
    CheckpointerFactory,
    UnknownCheckpointerError,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "BaseCheckpointer",
    "CheckpointerFactory",
    "UnknownCheckpointerError",
    "get_checkpointer",
    "list_checkpointers",
    "register_checkpointer",
]


def _hint(config_hint: str | None) -> str:
    """The hint without the ``//`` of the URL spelling (``s3://b/p`` → ``b/p``)."""
    hint = config_hint or ""
    return hint[2:] if hint.startswith("//") else hint


def _memory(
    *,
    config_hint: str | None = None,
    max_chain_depth: int = 5,
    compression_level: int = 6,
    max_epoch_age: timedelta | None = None,
) -> DeltaCheckpointer:
    if _hint(config_hint):
        raise ValueError(f"the memory checkpointer takes no configuration, got {config_hint!r}")
    return DeltaCheckpointer(None, max_chain_depth, compression_level, max_epoch_age=max_epoch_age)


def _file(
    *,
    config_hint: str | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    fsync: bool = True,
    max_chain_depth: int = 5,
    compression_level: int = 6,
    max_epoch_age: timedelta | None = None,
) -> DeltaCheckpointer:
    directory = base_dir or _hint(config_hint)
    if not directory:
        raise ValueError("the file checkpointer needs a directory: 'file:./checkpoints'")
    storage = FileDeltaStorage(directory, fsync=fsync)
    return DeltaCheckpointer(
        storage, max_chain_depth, compression_level, max_epoch_age=max_epoch_age
    )


def _s3(
    *,
    config_hint: str | None = None,
    bucket: str | None = None,
    prefix: str | None = None,
    **options: Any,
) -> S3Backend:
    hinted_bucket, _, hinted_prefix = _hint(config_hint).partition("/")
    bucket = bucket or hinted_bucket
    if not bucket:
        raise ValueError("the s3 checkpointer needs a bucket: 's3:bucket' or 's3:bucket/prefix'")
    return S3Backend(bucket, prefix if prefix is not None else hinted_prefix, **options)


#: The providers' table (the same dict as :data:`tulip_memory.providers.PROVIDERS`).
_CHECKPOINTERS = providers.PROVIDERS
_CHECKPOINTERS.update({"memory": _memory, "file": _file, "s3": _s3})


def get_checkpointer(checkpointer_string: str, **kwargs: Any) -> BaseCheckpointer:
    """
    Get a checkpointer from a string identifier.

    Format: "provider" or "provider:config_hint"

    The config_hint is provider-specific and is passed as a keyword argument.

    Examples:
        - "memory" -> DeltaCheckpointer(InMemoryDeltaStorage())
        - "file:./checkpoints" -> DeltaCheckpointer(FileDeltaStorage("./checkpoints"))
        - "s3:my-bucket/threads" -> S3Backend(bucket="my-bucket", prefix="threads")

    Raises:
        ValueError: If provider is unknown (:class:`UnknownCheckpointerError`)
    """
    if ":" in checkpointer_string:
        provider, config_hint = checkpointer_string.split(":", 1)
    else:
        provider, config_hint = checkpointer_string, None
    made_by = providers.factory(provider)
    if config_hint:
        kwargs["config_hint"] = config_hint
    return made_by(**kwargs)


def register_checkpointer(name: str, factory: CheckpointerFactory) -> None:
    """
    Register a checkpointer provider.

    Args:
        name: Provider name (e.g., "redis", "postgresql", "queued")
        factory: Factory function that takes kwargs and returns a checkpointer

    Example:
        >>> def my_factory(**kwargs) -> BaseCheckpointer:
        ...     return MyCustomCheckpointer(**kwargs)
        >>> register_checkpointer("custom", my_factory)
    """
    providers.register(name, factory)


def list_checkpointers() -> list[str]:
    """
    List available checkpointer providers.

    Returns:
        List of registered provider names (and those declared as entry points)
    """
    return providers.names()
