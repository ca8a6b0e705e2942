"""What a chat backend imports: ``Producer`` (publish), events and shard routing."""

from producer.claimcheck import ClaimCheckStore
from producer.producer import AsyncProducer, Producer
from producer.routing import ShardRouter, stable_hash
from producer.settings import ProducerSettings

__all__ = [
    "AsyncProducer",
    "ClaimCheckStore",
    "Producer",
    "ProducerSettings",
    "ShardRouter",
    "stable_hash",
]
