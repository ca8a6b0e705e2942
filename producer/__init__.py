"""What a chat backend imports: ``Producer`` (publish), ``Reader`` (recall, status),
the SDK adapter ``QueuedMemoryManager``, events and shard routing."""

from producer.claimcheck import ClaimCheckStore
from producer.producer import AsyncProducer, Producer
from producer.queued import QueuedMemoryManager
from producer.reader import AsyncReader, EventStatus, Reader
from producer.routing import ShardRouter, stable_hash
from producer.settings import ProducerSettings

__all__ = [
    "AsyncProducer",
    "AsyncReader",
    "ClaimCheckStore",
    "EventStatus",
    "Producer",
    "ProducerSettings",
    "QueuedMemoryManager",
    "Reader",
    "ShardRouter",
    "stable_hash",
]
