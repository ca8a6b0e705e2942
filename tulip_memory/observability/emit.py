"""``tulip.observability.emit``: the event names and ``emit`` / ``emit_sync``.

A re-export of :mod:`tulip_memory.events` (the same objects, one subscriber list), so
code ported from tulip keeps its imports.
"""

from tulip_memory.events import (
    EV_MEMORY_COMPACTOR_COMPLETED,
    EV_MEMORY_COMPACTOR_TRIGGERED,
    EV_MEMORY_CONVERSATION_PRUNED,
    EV_MEMORY_EXTRACTOR_COMPLETED,
    EV_MEMORY_MANAGER_EXTRACT_FAILED,
    EV_MEMORY_MANAGER_EXTRACTED,
    EV_MEMORY_MANAGER_INJECTED,
    Subscriber,
    emit,
    emit_sync,
    subscribe,
)

__all__ = [
    "EV_MEMORY_COMPACTOR_COMPLETED",
    "EV_MEMORY_COMPACTOR_TRIGGERED",
    "EV_MEMORY_CONVERSATION_PRUNED",
    "EV_MEMORY_EXTRACTOR_COMPLETED",
    "EV_MEMORY_MANAGER_EXTRACTED",
    "EV_MEMORY_MANAGER_EXTRACT_FAILED",
    "EV_MEMORY_MANAGER_INJECTED",
    "Subscriber",
    "emit",
    "emit_sync",
    "subscribe",
]
