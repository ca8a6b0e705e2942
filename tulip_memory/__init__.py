"""tulip-memory: the tulip SDK's memory layer and its production backends."""

from tulip_memory.errors import TulipMemoryError

__all__ = ["TulipMemoryError"]
__version__ = "0.1.0"
