"""Checkpointer backends (``tulip.memory.backends``): per-thread state, not a ``BaseStore``.

:class:`S3Backend` is the seed's production target, S3-compatible object storage, with
its retention rules (:func:`install_lifecycle_rules`, :meth:`S3Backend.install_lifecycle`).
"""

from tulip_memory.backends.lifecycle import (
    LifecycleResult,
    install_lifecycle_rules,
    lifecycle_rules,
)
from tulip_memory.backends.s3 import S3Backend

__all__ = ["LifecycleResult", "S3Backend", "install_lifecycle_rules", "lifecycle_rules"]
