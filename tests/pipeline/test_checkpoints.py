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


def test_long_threads_get_a_background_summary_the_read_path_uses(pipeline: Pipeline) -> None:
    settings = {"TULIP_SUMMARIZE_OVER_TOKENS": "150", "TULIP_SUMMARY_KEEP_RECENT": "4"}
    pipeline.start_shards(**settings)  # extract shards: not used here, harmless
    for k in range(SHARDS):
        pipeline.start_shard(k, role="checkpoint", **settings)
    pipeline.workers.start("summarize", ["memory.summarize"], **pipeline.env(**settings))
    thread = "long-ticket"
    with pipeline.producer() as producer, pipeline.reader() as reader:
        for n in range(1, 31):
            msgs = [Message(role=Role.SYSTEM, content="You are a support agent.")]
            for i in range(n):
                msgs += [
                    Message(role=Role.USER, content=f"Question {i}: where is parcel {i}?"),
                    Message(role=Role.ASSISTANT, content=f"Parcel {i} is in the depot."),
                ]
            producer.checkpoint_saved(thread, AgentState(messages=tuple(msgs)))
        assert producer.flush(timeout=30)
        deadline = time.monotonic() + 90
        compacted = None
        while time.monotonic() < deadline:
            compacted = reader.load(thread, view="compacted")
            if compacted is not None and any(
                m.content.startswith("[Summary of previous conversation")
                for m in compacted.messages
            ):
                break
            time.sleep(0.5)
        assert compacted is not None
        summaries = [m for m in compacted.messages if m.content.startswith("[Summary")]
        assert len(summaries) == 1
        full = reader.load(thread)
        assert full is not None and len(compacted.messages) < len(full.messages)
        assert compacted.messages[-1] == full.messages[-1]  # the newest turns are kept whole
