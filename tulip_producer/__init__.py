"""What a chat backend imports: ``Producer`` (publish), ``Reader`` (recall, status),
the SDK adapter ``QueuedMemoryManager``, events and shard routing."""

from tulip_producer.producer import AsyncProducer, Producer
from tulip_producer.queued import QueuedMemoryManager
from tulip_producer.reader import AsyncReader, EventStatus, Reader
from tulip_producer.settings import ProducerSettings, ReaderSettings
from tulip_wire.claimcheck import ClaimCheckStore
from tulip_wire.routing import ShardRouter, stable_hash

__all__ = [
    "AsyncProducer",
    "AsyncReader",
    "ClaimCheckStore",
    "EventStatus",
    "Producer",
    "ProducerSettings",
    "QueuedMemoryManager",
    "Reader",
    "ReaderSettings",
    "ShardRouter",
    "stable_hash",
]
