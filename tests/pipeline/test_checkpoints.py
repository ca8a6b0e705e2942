"""Thread checkpoints end to end: ordered per thread under SIGKILL, read your writes."""

from __future__ import annotations

import asyncio
import time

from producer.routing import ShardRouter
from tests.pipeline.conftest import SHARDS, Pipeline
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState


def state(thread: str, n: int) -> AgentState:
    msgs = [Message(role=Role.USER, content=f"{thread} turn {i}") for i in range(n)]
    return AgentState(messages=tuple(msgs), iterations=n)


def test_checkpoints_apply_in_order_per_thread_through_a_sigkill(pipeline: Pipeline) -> None:
    threads = [f"ticket-{i}" for i in range(4)]
    victim_shard = ShardRouter("memory.checkpoint", SHARDS).shard(threads[0])
    for k in range(SHARDS):
        pipeline.start_shard(k, role="checkpoint")
    ids: dict[str, list[str]] = {t: [] for t in threads}
    with pipeline.producer() as producer, pipeline.reader() as reader:
        for n in range(1, 16):
            for t in threads:
                ids[t].append(producer.checkpoint_saved(t, state(t, n)))
                assert reader.load(t) == state(t, n)  # read your writes, always
            if n == 6:
                victim = next(
                    w for w in pipeline.workers.started if w.name == f"checkpoint-{victim_shard}"
                )
                victim.kill()
                pipeline.start_shard(victim_shard, role="checkpoint")
        assert producer.flush(timeout=30)
        store = get_checkpointer(pipeline.env()["TULIP_CHECKPOINT_URL"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            heads = {t: asyncio.run(store.load(t)) for t in threads}
            if all(heads[t] == state(t, 15) for t in threads):
                break
            time.sleep(0.3)
        for t in threads:
            assert asyncio.run(store.load(t)) == state(t, 15)
            assert reader.load(t) == state(t, 15)
            stored = asyncio.run(store.list_checkpoints(t, limit=100))
            assert set(stored) == set(ids[t])  # every checkpoint written, none twice
            for n, cid in enumerate(ids[t], start=1):
                assert reader.load(t, cid) == state(t, n)
