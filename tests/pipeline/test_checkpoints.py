"""Thread checkpoints end to end: ordered per thread under SIGKILL, read your writes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState
from tulip_wire.events import thread_key
from tulip_wire.routing import ShardRouter

T = "acme"


def state(thread: str, n: int) -> AgentState:
    msgs = [Message(role=Role.USER, content=f"{thread} turn {i}") for i in range(n)]
    return AgentState(messages=tuple(msgs), iterations=n)


def test_checkpoints_apply_in_order_per_thread_through_a_sigkill(pipeline: Pipeline) -> None:
    """Two tenants use the same thread ids: four threads each, never mixed up."""
    tenants, names = ("acme", "globex"), [f"ticket-{i}" for i in range(4)]
    threads = [(tenant, t) for tenant in tenants for t in names]
    victim_shard = ShardRouter("memory.checkpoint", SHARDS).shard(thread_key(*threads[0]))
    pipeline.start_shards(role="checkpoint")
    ids: dict[tuple[str, str], list[str]] = {t: [] for t in threads}

    def own(tenant: str, t: str, n: int) -> AgentState:
        return state(f"{tenant}/{t}", n)

    with pipeline.producer() as producer, pipeline.reader() as reader:
        for n in range(1, 16):
            for tenant, t in threads:
                ids[tenant, t].append(
                    producer.checkpoint_saved(t, own(tenant, t, n), tenant=tenant)
                )
                assert reader.load(t, tenant=tenant) == own(tenant, t, n)  # read your writes
            if n == 6:
                victim = next(
                    w for w in pipeline.workers.started if w.name == f"checkpoint-{victim_shard}"
                )
                victim.kill()
                pipeline.start_shard(victim_shard, role="checkpoint")
        assert producer.flush(timeout=30)
        base = get_checkpointer(pipeline.env()["TULIP_CHECKPOINT_URL"])
        assert isinstance(base, DeltaCheckpointer)
        stores = {tenant: tenant_checkpointer(base, tenant) for tenant in tenants}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            heads = {(te, t): asyncio.run(stores[te].load(t)) for te, t in threads}
            if all(heads[te, t] == own(te, t, 15) for te, t in threads):
                break
            time.sleep(0.3)
        for tenant, t in threads:
            assert asyncio.run(stores[tenant].load(t)) == own(tenant, t, 15)
            assert reader.load(t, tenant=tenant) == own(tenant, t, 15)
            stored = asyncio.run(stores[tenant].list_checkpoints(t, limit=100))
            assert set(stored) == set(ids[tenant, t])  # every checkpoint written, none twice
            for n, cid in enumerate(ids[tenant, t], start=1):
                assert reader.load(t, cid, tenant=tenant) == own(tenant, t, n)
        assert asyncio.run(base.list_threads()) == []  # nothing tenant-less


def test_long_threads_get_incremental_background_summaries_through_the_model(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    calls: list[str] = []

    def model(request: Any) -> Reply:
        prompt = json.dumps(request["messages"])
        calls.append(prompt)
        if "broken-ticket" in prompt:
            return Reply(status=500)
        return Reply(content=f"SUMMARY-{len(calls)}", delay=0.3)

    fake_openai.default_chat = model
    settings = {
        "TULIP_SUMMARIZE_OVER_TOKENS": "150",
        "TULIP_SUMMARY_STEP_TOKENS": "1",  # summarize every new turn: the test waits for all
        "TULIP_SUMMARY_KEEP_RECENT": "4",
        "TULIP_SUMMARY_MODEL": "openai/summary-model",
        "OPENAI_API_BASE": fake_openai.url,
        "OPENAI_API_KEY": "test",
    }
    shards = [pipeline.shard(k, "checkpoint", **settings) for k in range(SHARDS)]
    summarize = pipeline.workers.solo("summarize", ["memory.summarize"], **pipeline.env(**settings))
    pipeline.workers.start_all([*shards, summarize])
    with pipeline.producer() as producer, pipeline.reader() as reader:
        for thread in ("long-ticket", "broken-ticket"):
            for n in range(1, 31):
                producer.checkpoint_saved(
                    thread, AgentState(messages=tuple(chat(thread, n))), tenant=T
                )
                time.sleep(0.02)
        assert producer.flush(timeout=30)
        deadline = time.monotonic() + 120
        summary: list[Message] = []
        while time.monotonic() < deadline:
            view = reader.load("long-ticket", view="compacted", tenant=T)
            assert view is not None
            summary = [m for m in view.messages if m.content.startswith("[Summary")]
            full = reader.load("long-ticket", tenant=T)
            assert full is not None
            if summary and view.messages[-1] == full.messages[-1] and len(full.messages) == 61:
                covered = int(summary[0].content.split("(")[1].split(" ")[0])
                if covered == 61 - 5 - 4:  # everything but the anchor and the newest four
                    break
            time.sleep(0.5)
        assert len(summary) == 1 and summary[0].content.split("\n", 1)[1].startswith("SUMMARY-")
        # Incremental: a later request extends an earlier summary with newer turns only.
        later = [c for c in calls if "long-ticket" in c and "SUMMARY-" in c]
        assert later, "no request extended a previous summary"
        assert fake_openai.max_inflight == 1  # one job per thread at a time, never two
        # The failing summarizer left its thread loadable and unsummarized.
        broken = reader.load("broken-ticket", view="compacted", tenant=T)
        assert broken is not None and broken == reader.load("broken-ticket", tenant=T)
        assert not any(m.content.startswith("[Summary") for m in broken.messages)


def chat(thread: str, turns: int) -> list[Message]:
    msgs = [Message(role=Role.SYSTEM, content=f"You are a support agent on {thread}.")]
    for i in range(turns):
        msgs += [
            Message(role=Role.USER, content=f"{thread} question {i}: where is parcel {i}?"),
            Message(role=Role.ASSISTANT, content=f"Parcel {i} is in the depot."),
        ]
    return msgs
