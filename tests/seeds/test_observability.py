"""``tulip.observability.emit`` → ``tulip_memory.observability.emit``: one implementation."""

from __future__ import annotations

import tulip_memory.events as events
import tulip_memory.observability.emit as seed_emit
from tests.support.events import recording
from tulip_memory.observability.emit import (
    EV_MEMORY_COMPACTOR_COMPLETED,
    EV_MEMORY_COMPACTOR_TRIGGERED,
    EV_MEMORY_CONVERSATION_PRUNED,
    EV_MEMORY_MANAGER_EXTRACTED,
    EV_MEMORY_MANAGER_INJECTED,
    emit,
    emit_sync,
)


def test_the_seed_path_re_exports_the_same_objects() -> None:
    assert seed_emit.emit is events.emit and seed_emit.emit_sync is events.emit_sync
    assert seed_emit.subscribe is events.subscribe
    for name in dir(events):
        if name.startswith("EV_"):
            assert getattr(seed_emit, name) == getattr(events, name)


def test_the_seed_event_names() -> None:
    assert EV_MEMORY_CONVERSATION_PRUNED == "memory.conversation.pruned"
    assert EV_MEMORY_COMPACTOR_TRIGGERED == "memory.compactor.triggered"
    assert EV_MEMORY_COMPACTOR_COMPLETED == "memory.compactor.completed"
    assert EV_MEMORY_MANAGER_INJECTED == "memory.manager.injected"
    assert EV_MEMORY_MANAGER_EXTRACTED == "memory.manager.extracted"


async def test_events_emitted_on_the_seed_path_reach_the_one_subscriber_list() -> None:
    with recording() as log:
        await emit("memory.manager.extracted", backend="mem0", message_count=2)
        emit_sync(EV_MEMORY_CONVERSATION_PRUNED, strategy="sliding_window", removed_count=1)
        await events.emit(EV_MEMORY_MANAGER_INJECTED, memory_count=1)
    assert [n for n, _ in log.events] == [
        "memory.manager.extracted",
        "memory.conversation.pruned",
        "memory.manager.injected",
    ]
    assert log.named("memory.manager.extracted") == [{"backend": "mem0", "message_count": 2}]
