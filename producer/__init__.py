"""What a chat backend imports: event routing now; events, Producer and Reader next."""

from producer.routing import ShardRouter, stable_hash

__all__ = ["ShardRouter", "stable_hash"]
