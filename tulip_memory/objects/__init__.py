"""Bytes by key: the one object-store contract under checkpoints, summaries and claim checks.

:class:`ObjectStore` (:mod:`~tulip_memory.objects.base`) is five blocking operations on
whole objects (``get`` with an optional byte bound, ``put`` with an optional version
condition, ``delete``, ``list``, ``copy``), written once for each backend:
:class:`FileObjectStore` (a directory, owner-only files), :class:`S3ObjectStore` (any S3
API) and :class:`MemoryObjectStore` (this process). The claim checks call it as it is,
from the producer's and the workers' threads; the checkpoint storage
(:mod:`tulip_memory.delta.objects`), and the summaries kept in it, call it from the event
loop through one adapter that runs each call in a thread.
"""

from tulip_memory.objects.base import (
    ObjectChanged,
    ObjectInfo,
    ObjectPage,
    ObjectStore,
    ObjectStoreError,
)
from tulip_memory.objects.file import FileObjectStore
from tulip_memory.objects.memory import MemoryObjectStore
from tulip_memory.objects.s3 import S3ObjectStore, s3_client

__all__ = [
    "FileObjectStore",
    "MemoryObjectStore",
    "ObjectChanged",
    "ObjectInfo",
    "ObjectPage",
    "ObjectStore",
    "ObjectStoreError",
    "S3ObjectStore",
    "s3_client",
]
