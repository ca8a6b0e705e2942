"""Background extraction: order per namespace, the concurrency bound, drain, failures.

The bound and the order are measured by instrumenting the extract function.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from tests.support.events import EventLog
from tulip_memory.manager import LLMMemoryManager, Memory, MemoryType, RunInfo
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store import BaseStore


def ended(user_id: str, seq: int) -> AgentState:
    return AgentState(
        messages=[Message(role=Role.USER, content=f"session {seq}")],
        metadata={"user_id": user_id},
    )


@dataclass
class Probe:
    """An extract function that records what ran, where, and how many at once."""

    manager: LLMMemoryManager | None = None
    running: int = 0
    max_running: int = 0
    order: dict[tuple[str, ...], list[int]] = field(default_factory=lambda: defaultdict(list))
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    fail_on: frozenset[int] = frozenset()
    gate: asyncio.Event | None = None

    async def __call__(self, messages: list[Message]) -> list[Memory]:
        assert self.manager is not None
        seq = int(messages[-1].content.split()[-1])
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.rng.uniform(0, 0.01))
            self.order[self.manager.active_namespace].append(seq)
            if seq in self.fail_on:
                raise RuntimeError(f"session {seq} failed")
            return [Memory(type=MemoryType.PROJECT, key="last-session", content=f"session {seq}")]
        finally:
            self.running -= 1


def background_manager(store: BaseStore, tenant: str, probe: Probe, limit: int) -> LLMMemoryManager:
    def resolve(run: RunInfo) -> tuple[str, ...]:
        return (tenant, "users", str(run.metadata["user_id"]))

    manager = LLMMemoryManager(
        store,
        extract_fn=probe,
        extract_mode="background",
        max_concurrent_extractions=limit,
        namespace_resolver=resolve,
    )
    probe.manager = manager
    return manager


async def test_jobs_of_a_namespace_run_in_order_and_at_most_n_at_once(
    store: BaseStore, tenant: str, events: EventLog
) -> None:
    probe = Probe()
    manager = background_manager(store, tenant, probe, limit=3)
    users = [f"u{i}" for i in range(5)]
    submitted: dict[tuple[str, ...], list[int]] = defaultdict(list)
    states = [(users[seq % 5], seq) for seq in range(50)]
    # All 50 runs end at once; each submits before its first await, in this order.
    await asyncio.gather(*(manager.on_session_end(ended(u, seq)) for u, seq in states))
    for u, seq in states:
        submitted[(tenant, "users", u)].append(seq)
    assert manager.pending_extractions > 0  # on_session_end did not wait for the jobs

    await manager.drain()
    assert manager.pending_extractions == 0
    assert probe.order == submitted
    assert probe.max_running == 3
    assert len(events.named("memory.manager.extracted")) == 50
    for ns, seqs in submitted.items():
        with manager.scoped(ns):
            (last,) = await manager.retrieve()
        assert last.content == f"session {seqs[-1]}"  # saves applied in order


async def test_a_failing_job_is_reported_and_the_next_jobs_still_run(
    store: BaseStore, tenant: str, events: EventLog
) -> None:
    probe = Probe(fail_on=frozenset({1}))
    manager = background_manager(store, tenant, probe, limit=2)
    for seq in range(3):
        await manager.on_session_end(ended("u0", seq))
    await manager.drain()  # does not raise
    assert probe.order[(tenant, "users", "u0")] == [0, 1, 2]
    (failed,) = events.named("memory.manager.extract_failed")
    assert failed["reason"] == "session 1 failed"
    assert failed["namespace"] == [tenant, "users", "u0"]
    with manager.scoped((tenant, "users", "u0")):
        assert [m.content for m in await manager.retrieve()] == ["session 2"]


async def test_drain_waits_for_jobs_submitted_while_draining(store: BaseStore, tenant: str) -> None:
    gate = asyncio.Event()
    probe = Probe(gate=gate)
    manager = background_manager(store, tenant, probe, limit=4)
    await manager.on_session_end(ended("u0", 0))
    drain = asyncio.create_task(manager.drain())
    await asyncio.sleep(0.01)
    await manager.on_session_end(ended("u1", 1))
    await manager.on_session_end(ended("u0", 2))
    assert not drain.done()
    gate.set()
    await drain
    assert manager.pending_extractions == 0
    assert probe.order == {(tenant, "users", "u0"): [0, 2], (tenant, "users", "u1"): [1]}


async def test_cancelling_drain_leaves_the_jobs_running(store: BaseStore, tenant: str) -> None:
    gate = asyncio.Event()
    probe = Probe(gate=gate)
    manager = background_manager(store, tenant, probe, limit=1)
    await manager.on_session_end(ended("u0", 0))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await manager.drain()
    assert manager.pending_extractions == 1
    gate.set()
    await manager.drain()
    assert probe.order == {(tenant, "users", "u0"): [0]}


async def test_drain_in_inline_mode_returns_at_once(store: BaseStore, tenant: str) -> None:
    manager = LLMMemoryManager(store, namespace_prefix=(tenant, "u"))
    await manager.on_session_end(ended("u0", 0))
    await manager.drain()
    assert manager.pending_extractions == 0
