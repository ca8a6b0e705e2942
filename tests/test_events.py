"""The observability hooks: subscribe, emit, and subscribers that fail."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from tulip_memory import events
from tulip_memory.events import emit, emit_sync, subscribe


async def test_subscribers_receive_events_until_unsubscribed() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    unsubscribe = subscribe(lambda name, fields: seen.append((name, dict(fields))))
    await emit(events.EV_MEMORY_MANAGER_INJECTED, memory_count=2, types=["user", "project"])
    unsubscribe()
    unsubscribe()  # idempotent
    await emit(events.EV_MEMORY_MANAGER_INJECTED, memory_count=1, types=["user"])
    assert seen == [("memory.manager.injected", {"memory_count": 2, "types": ["user", "project"]})]


async def test_async_subscribers_are_awaited() -> None:
    seen: list[str] = []

    async def on_event(name: str, fields: Mapping[str, Any]) -> None:
        seen.append(name)

    unsubscribe = subscribe(on_event)
    try:
        await emit(events.EV_MEMORY_COMPACTOR_TRIGGERED, strategy="summarizing")
    finally:
        unsubscribe()
    assert seen == ["memory.compactor.triggered"]


async def test_a_failing_subscriber_never_breaks_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(name: str, fields: Mapping[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    async def broken_async(name: str, fields: Mapping[str, Any]) -> None:
        raise RuntimeError("async subscriber bug")

    unsubscribers = [
        subscribe(broken),
        subscribe(broken_async),
        subscribe(lambda name, fields: seen.append(name)),
    ]
    try:
        with caplog.at_level(logging.ERROR, logger="tulip_memory.events"):
            await emit(events.EV_MEMORY_MANAGER_EXTRACTED, memory_count=0)
            emit_sync(events.EV_MEMORY_CONVERSATION_PRUNED, removed_count=3)
            await asyncio.sleep(0)  # the async subscriber's scheduled delivery
    finally:
        for unsubscribe in unsubscribers:
            unsubscribe()
    assert seen == ["memory.manager.extracted", "memory.conversation.pruned"]
    assert "subscriber bug" in caplog.text and "async subscriber bug" in caplog.text


def test_event_names_match_the_sdk() -> None:
    assert events.EV_MEMORY_MANAGER_INJECTED == "memory.manager.injected"
    assert events.EV_MEMORY_MANAGER_EXTRACTED == "memory.manager.extracted"
    assert events.EV_MEMORY_MANAGER_EXTRACT_FAILED == "memory.manager.extract_failed"
    assert events.EV_MEMORY_CONVERSATION_PRUNED == "memory.conversation.pruned"
    assert events.EV_MEMORY_COMPACTOR_TRIGGERED == "memory.compactor.triggered"
    assert events.EV_MEMORY_COMPACTOR_COMPLETED == "memory.compactor.completed"


async def test_sync_emit_schedules_async_subscribers_on_the_running_loop() -> None:
    seen: list[str] = []

    async def on_event(name: str, fields: Mapping[str, Any]) -> None:
        seen.append(name)

    unsubscribe = subscribe(on_event)
    try:
        emit_sync(events.EV_MEMORY_CONVERSATION_PRUNED, removed_count=1)
        await asyncio.sleep(0)
    finally:
        unsubscribe()
    assert seen == ["memory.conversation.pruned"]
