"""Delta checkpoint storage and load cost on long threads, one save per turn.

For each thread (synthetic, or LoCoMo conversations with ``--dataset``), every turn is
saved and, on the same storage, compared with:

- **full**: the whole state every save (zlib 6), one object per save;
- **seed**: the seed's policy, a plain chain: a full snapshot every ``depth + 1`` saves,
  else a zlib-6 delta from the parent, one object per save; loading the latest walks
  the chain back (one GET per link, after one for the index);
- **limit**: the physical limit, each message stored once (the final state, zlib 6);
- **floor**: one GET of the final state, decompressed and parsed;
- **langgraph** (``--langgraph``, in a bench environment with
  ``langgraph-checkpoint-postgres``, never a project dependency): LangGraph's
  ``PostgresSaver`` on an embedded Postgres, the same turns as channels (``messages``
  and the other fields), one ``put`` per turn, ``get_tuple`` by id for old loads.

Reported: bytes at rest, load p50 of the latest and of older checkpoints (with GETs
and round trips; an old checkpoint both by the checkpointer that saved the thread and
loaded others before, whose history cache holds the objects it read, and ``cold``, by
a new checkpointer with no caches), and save p50, as ratios. ``--sweep`` adds a table of how
``max_chain_depth`` trades reads against rewriting.

``--wire`` adds bytes on the wire per ``checkpoint_saved`` and its latency, deltas
against whole states (:mod:`bench.wire`).

Usage::

    python -m bench.checkpoints                              # synthetic threads
    python -m bench.checkpoints --dataset '../shared/data/locomo10/*.json'
    python -m bench.checkpoints --langgraph ...  # adds LangGraph's PostgresSaver

Storage: ``--storage s3`` (default) starts a moto S3 server in a subprocess unless
``--endpoint-url`` points at one (MinIO, AWS); ``--storage file`` or ``memory``. With
gunicorn in the bench environment moto is served by it, keeping connections alive as
S3 and MinIO do (moto's own server opens one per request: :func:`moto_command`)::

    python -m venv /tmp/lgvenv && /tmp/lgvenv/bin/pip install -e '.[embedded,dev]' \
        langgraph-checkpoint-postgres 'psycopg[binary]' gunicorn
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import glob
import importlib
import importlib.util
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tulip_memory.delta import (
    DeltaCheckpointer,
    DeltaStorage,
    FileDeltaStorage,
    InMemoryObjectStorage,
    ObjectPage,
    S3DeltaStorage,
)
from tulip_memory.delta.cache import LatestCache
from tulip_memory.delta.codec import dumps
from tulip_memory.delta.diff import apply, diff
from tulip_memory.delta.history import HistoryCache
from tulip_memory.delta.keys import ThreadKeys
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
# fmt: off
WORDS = [
    "refund", "order", "shipping", "invoice", "account", "password", "reset", "eligible",
    "warehouse", "policy", "customer", "ticket", "escalate", "manager", "approval",
    "delivery", "tracking", "label", "return", "damaged", "replacement", "credit", "card",
    "billing", "address", "discount", "coupon", "subscription", "renewal",
]
# fmt: on


@dataclass(frozen=True)
class Thread:
    name: str
    states: list[AgentState]


class CountingStorage(DeltaStorage):
    """Counts read round trips and GETs crossing a storage."""

    def __init__(self, inner: DeltaStorage) -> None:
        self.inner = inner
        self.trips = 0
        self.gets = 0
        self.written = 0
        self.written_log = 0

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        self.trips += 1
        self.gets += len(keys)
        return await self.inner.read_objects(keys)

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        self.written += sum(len(v) for v in objects.values())
        self.written_log += sum(len(v) for k, v in objects.items() if k.startswith("log/"))
        await self.inner.write_objects(objects)

    async def write_head(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        self.written += len(data)
        return await self.inner.write_head(key, data, if_match)

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await self.inner.delete_objects(keys)

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        return await self.inner.list_objects(prefix, start_after=start_after, limit=limit)

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return await self.inner.copy_objects(pairs)


# -- threads ---------------------------------------------------------------------------


def locomo_thread(path: Path) -> Thread:
    """A LoCoMo conversation: one message per turn, sessions in order."""
    data = json.loads(path.read_text())
    a = data.get("speaker_a")
    numbers = sorted(
        int(k.split("_")[1])
        for k, v in data.items()
        if k.startswith("session_") and isinstance(v, list)
    )
    states: list[AgentState] = []
    messages: list[Message] = []
    for n in numbers:
        when = data.get(f"session_{n}_date_time", "")
        for turn in data[f"session_{n}"]:
            meta = {"dia_id": turn["dia_id"]}
            if turn.get("blip_caption"):
                meta["image_caption"] = turn["blip_caption"]
            role = Role.USER if turn["speaker"] == a else Role.ASSISTANT
            messages.append(
                Message(role=role, content=turn["text"], name=turn["speaker"], metadata=meta)
            )
            states.append(
                AgentState(
                    messages=messages,
                    iterations=len(states) + 1,
                    metadata={"session": n, "session_date": when},
                )
            )
    return Thread(f"locomo/{path.stem}", states)


def synthetic_thread(seed: int, turns: int) -> Thread:
    """A support agent: system prompt, a memory block refreshed every 10 turns (an edit
    near the front), user and assistant turns, tool calls with their results and the
    tool_executions dedup history, per-thread metadata that changes every turn."""
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))

    messages = [
        Message(role=Role.SYSTEM, content="You are a support agent. " + text(30, 40)),
        Message(role=Role.SYSTEM, content="Memories: " + text(10, 20), metadata={"block": 1}),
    ]
    tools: dict[str, Any] = {}
    states: list[AgentState] = []
    for t in range(turns):
        if t % 10 == 9:
            messages[1] = Message(
                role=Role.SYSTEM, content="Memories: " + text(10, 30), metadata={"block": 1}
            )
        messages.append(Message(role=Role.USER, content=text(5, 30)))
        if rng.random() < 0.3:
            call = ToolCall(id=f"call-{t}", name="lookup", arguments={"order": f"ord-{t}"})
            messages.append(Message(role=Role.ASSISTANT, tool_calls=[call]))
            result = text(10, 40)
            messages.append(
                Message(role=Role.TOOL, content=result, tool_call_id=call.id, name="lookup")
            )
            tools[f"lookup:ord-{t}"] = {"result": result[:40], "turn": t}
        messages.append(Message(role=Role.ASSISTANT, content=text(10, 60)))
        states.append(
            AgentState(
                messages=messages,
                tool_executions=dict(tools),
                iterations=t + 1,
                metadata={"turn": t, "topic": rng.choice(WORDS), "user": "u-42"},
            )
        )
    return Thread(f"synthetic/{seed}", states)


# -- measuring -------------------------------------------------------------------------


async def timed(fn: Callable[[], Awaitable[T]]) -> tuple[float, T]:
    t0 = time.perf_counter()
    out = await fn()
    return (time.perf_counter() - t0) * 1000, out


def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def compressed_state(state: AgentState) -> bytes:
    return zlib.compress(dumps(state.to_checkpoint()), 6)


async def at_rest(storage: DeltaStorage, prefixes: Sequence[str]) -> int:
    total = 0
    for prefix in prefixes:
        token = None
        while True:
            page = await storage.list_objects(prefix, start_after=token)
            total += sum(o.size for o in page.objects)
            if not page.truncated:
                break
            token = page.keys[-1]
    return total


@dataclass
class Result:
    name: str
    saves: int
    ours: int
    full: int
    seed: int
    limit: int
    load_ours: float
    load_seed: float
    floor: float
    load_old: float
    load_old_cold: float
    old_gets: int
    old_trips: int
    save_ours: float
    save_full: float
    save_seed: float
    save_lg: float = float("nan")
    load_lg: float = float("nan")
    load_lg_old: float = float("nan")


class LangGraphPostgres:
    """LangGraph's ``PostgresSaver``: each turn one ``put`` of the state as channels
    (``messages`` changes every turn, so its blob is written whole, as LangGraph
    does), loads by ``get_tuple`` and the same ``AgentState.from_checkpoint``."""

    def __init__(self, saver: Any, name: str) -> None:
        self.saver = saver
        self.tid = f"{name}-{uuid.uuid4().hex[:6]}"
        self.config: dict[str, Any] = {"configurable": {"thread_id": self.tid, "checkpoint_ns": ""}}
        self.ids: list[str] = []
        self.base = importlib.import_module("langgraph.checkpoint.base")

    async def save(self, i: int, state: AgentState) -> None:
        data = state.to_checkpoint()
        checkpoint = self.base.empty_checkpoint()
        checkpoint["channel_values"] = data
        versions = {k: i + 1 for k in data}
        checkpoint["channel_versions"] = versions
        metadata = {"source": "loop", "step": i}
        self.config = self.saver.put(self.config, checkpoint, metadata, versions)
        self.ids.append(self.config["configurable"]["checkpoint_id"])

    async def load(self, checkpoint_id: str | None = None) -> AgentState:
        config: dict[str, Any] = {"configurable": {"thread_id": self.tid, "checkpoint_ns": ""}}
        if checkpoint_id is not None:
            config["configurable"]["checkpoint_id"] = checkpoint_id
        found = self.saver.get_tuple(config)
        return AgentState.from_checkpoint(found.checkpoint["channel_values"])


@contextmanager
def langgraph_saver() -> Iterator[Any]:
    """A ``PostgresSaver`` on an embedded Postgres in a temp dir, stopped on exit."""
    from tulip_ops.dev.embedded import EmbeddedPostgres

    postgres_mod = importlib.import_module("langgraph.checkpoint.postgres")
    with tempfile.TemporaryDirectory(prefix="tulip-bench-lg-") as d:
        postgres = EmbeddedPostgres(Path(d) / "postgres", keep=False)
        postgres.start()
        try:
            with postgres_mod.PostgresSaver.from_conn_string(postgres.admin_dsn) as saver:
                saver.setup()
                yield saver
        finally:
            postgres.stop()


class Ours:
    """The DeltaCheckpointer, counting what its loads read."""

    def __init__(self, storage: DeltaStorage, depth: int, name: str) -> None:
        self.storage = storage
        self.counted = CountingStorage(storage)
        self.cp = DeltaCheckpointer(self.counted, max_chain_depth=depth)
        self.tid = f"{name}-{uuid.uuid4().hex[:6]}"
        self.ids: list[str] = []

    async def save(self, state: AgentState) -> None:
        self.ids.append(await self.cp.save(state, self.tid))

    async def load_latest(self) -> AgentState | None:
        return await self.cp.load(self.tid)

    async def load(self, checkpoint_id: str) -> tuple[AgentState | None, int, int]:
        self.counted.trips = self.counted.gets = 0
        state = await self.cp.load(self.tid, checkpoint_id)
        return state, self.counted.gets, self.counted.trips

    async def load_cold(self, checkpoint_id: str) -> tuple[AgentState | None, int, int]:
        """:meth:`load` by a checkpointer that has read nothing before (no caches)."""
        self.cp, warm = self.cold(), self.cp
        try:
            return await self.load(checkpoint_id)
        finally:
            self.cp = warm

    def cold(self) -> DeltaCheckpointer:
        return DeltaCheckpointer(
            self.counted,
            max_chain_depth=self.cp.max_chain_depth,
            latest_cache=LatestCache(0, 0),
            history_cache=HistoryCache(0),
        )

    async def stored(self) -> int:
        keys = ThreadKeys.of(self.tid)
        return await at_rest(self.storage, [keys.head, keys.log_prefix])


class FullEverySave:
    """The whole state, zlib 6, one object per save."""

    def __init__(self, storage: DeltaStorage) -> None:
        self.storage = storage
        self.prefix = f"bench-full/{uuid.uuid4().hex[:8]}/"
        self.stored = 0

    async def save(self, i: int, state: AgentState) -> None:
        blob = compressed_state(state)
        await self.storage.write_objects({f"{self.prefix}{i:06d}": blob})
        self.stored += len(blob)


class SeedChain:
    """The seed's policy: a snapshot every depth+1 saves, else a delta from the parent
    (zlib 6), one object per save; loading walks the chain back one GET per link after
    one GET for the index (the seed's ``list_checkpoints(limit=1)``). Saves diff
    against the previous state in memory (the seed's in-process cache), which flatters it.
    """

    def __init__(self, storage: DeltaStorage, depth: int) -> None:
        self.storage = storage
        self.depth = depth
        self.prefix = f"bench-seed/{uuid.uuid4().hex[:8]}/"
        self.stored = 0
        self.previous: dict[str, Any] | None = None

    async def save(self, i: int, state: AgentState) -> None:
        data = json.loads(dumps(state.to_checkpoint()))
        if i % (self.depth + 1) == 0 or self.previous is None:
            payload: dict[str, Any] = {"full": data}
        else:
            payload = {"delta": diff(self.previous, data) or ["{", {}, []]}
        blob = zlib.compress(dumps(payload), 6)
        index = {f"{self.prefix}index": str(i).encode()}
        await self.storage.write_objects({f"{self.prefix}{i:06d}": blob, **index})
        self.stored += len(blob)
        self.previous = data

    async def load_latest(self) -> AgentState:
        index = await self.storage.read_objects([f"{self.prefix}index"])
        last = int(index[f"{self.prefix}index"] or b"0")
        chain: list[Any] = []
        for i in range(last, -1, -1):
            key = f"{self.prefix}{i:06d}"
            payload = json.loads(
                zlib.decompress((await self.storage.read_objects([key]))[key] or b"")
            )
            chain.append(payload)
            if "full" in payload:
                break
        state = chain.pop()["full"]
        for payload in reversed(chain):
            state = apply(state, payload["delta"])
        return AgentState.from_checkpoint(state)


class Floor:
    """One GET of the final state, decompressed and parsed: no load can do less."""

    def __init__(self, storage: DeltaStorage) -> None:
        self.storage = storage
        self.key = f"bench-floor/{uuid.uuid4().hex[:8]}"
        self.size = 0

    async def put(self, state: AgentState) -> None:
        blob = compressed_state(state)
        self.size = len(blob)
        await self.storage.write_objects({self.key: blob})

    async def load(self) -> AgentState:
        data = (await self.storage.read_objects([self.key]))[self.key] or b""
        return AgentState.from_checkpoint(json.loads(zlib.decompress(data)))


async def bench_thread(
    storage: DeltaStorage, thread: Thread, depth: int, loads: int, saver: Any = None
) -> Result:
    """Saves interleaved turn by turn, then loads interleaved round by round, so the
    schemes share the same conditions."""
    ours, full, seed, floor = (
        Ours(storage, depth, thread.name),
        FullEverySave(storage),
        SeedChain(storage, depth),
        Floor(storage),
    )
    lg = LangGraphPostgres(saver, thread.name) if saver is not None else None
    save_ms: dict[str, list[float]] = {"ours": [], "full": [], "seed": [], "lg": []}
    for i, state in enumerate(thread.states):
        save_ms["ours"].append((await timed(functools.partial(ours.save, state)))[0])
        save_ms["full"].append((await timed(functools.partial(full.save, i, state)))[0])
        save_ms["seed"].append((await timed(functools.partial(seed.save, i, state)))[0])
        if lg is not None:
            save_ms["lg"].append((await timed(functools.partial(lg.save, i, state)))[0])
    await floor.put(thread.states[-1])
    rng = random.Random(7)
    load_ms: dict[str, list[float]] = {
        k: [] for k in ("ours", "seed", "floor", "old", "old_cold", "lg", "lg_old")
    }
    gets = trips = 0
    for _ in range(loads):
        ms, latest = await timed(ours.load_latest)
        load_ms["ours"].append(ms)
        load_ms["seed"].append((await timed(seed.load_latest))[0])
        load_ms["floor"].append((await timed(floor.load))[0])
        n = rng.randrange(len(ours.ids) - 1)
        ms, (old, g, t) = await timed(functools.partial(ours.load, ours.ids[n]))
        load_ms["old"].append(ms)
        gets, trips = max(gets, g), max(trips, t)
        ms, (cold, g, t) = await timed(functools.partial(ours.load_cold, ours.ids[n]))
        load_ms["old_cold"].append(ms)
        gets, trips = max(gets, g), max(trips, t)
        assert latest == thread.states[-1] and old == thread.states[n] == cold
        if lg is not None:
            ms, lg_latest = await timed(lg.load)
            load_ms["lg"].append(ms)
            ms, lg_old = await timed(functools.partial(lg.load, lg.ids[n]))
            load_ms["lg_old"].append(ms)
            assert lg_latest == thread.states[-1] and lg_old == thread.states[n]
    return Result(
        name=thread.name,
        saves=len(thread.states),
        ours=await ours.stored(),
        full=full.stored,
        seed=seed.stored,
        limit=floor.size,
        load_ours=p50(load_ms["ours"]),
        load_seed=p50(load_ms["seed"]),
        floor=p50(load_ms["floor"]),
        load_old=p50(load_ms["old"]),
        load_old_cold=p50(load_ms["old_cold"]),
        old_gets=gets,
        old_trips=trips,
        save_ours=p50(save_ms["ours"]),
        save_full=p50(save_ms["full"]),
        save_seed=p50(save_ms["seed"]),
        save_lg=p50(save_ms["lg"]),
        load_lg=p50(load_ms["lg"]),
        load_lg_old=p50(load_ms["lg_old"]),
    )


# -- reporting -------------------------------------------------------------------------


def kb(n: float) -> str:
    return f"{n / 1024:,.0f}K"


def table(title: str, results: list[Result]) -> None:
    head = (
        f"{'thread':<16}{'saves':>6} | {'ours':>7}{'full':>8}{'seed':>8}{'limit':>7}"
        f" | {'full/ours':>9}{'full/seed':>10}{'ours/lim':>9}"
        f" | {'ld ms':>6}{'/floor':>7}{'seed/fl':>8} | {'old ms':>6}{'cold':>6}{'GETs':>5}"
        f"{'RT':>3}"
        f" | {'save ms':>7}{'/full':>6}{'seed':>6}"
    )
    print(f"\n{title}\n{head}\n{'-' * len(head)}")
    for r in [*results, total(results)] if len(results) > 1 else results:
        print(
            f"{r.name[-16:]:<16}{r.saves:>6} | {kb(r.ours):>7}{kb(r.full):>8}{kb(r.seed):>8}"
            f"{kb(r.limit):>7} | {r.full / r.ours:>8.1f}x{r.full / r.seed:>9.1f}x"
            f"{r.ours / r.limit:>8.2f}x | {r.load_ours:>6.2f}{r.load_ours / r.floor:>6.2f}x"
            f"{r.load_seed / r.floor:>7.2f}x | {r.load_old:>6.2f}{r.load_old_cold:>6.2f}"
            f"{r.old_gets:>5}{r.old_trips:>3}"
            f" | {r.save_ours:>7.2f}{r.save_ours / r.save_full:>5.2f}x"
            f"{r.save_seed / r.save_full:>5.2f}x"
        )


def langgraph_table(results: list[Result]) -> None:
    """Ours against LangGraph's PostgresSaver on the same turns (p50 ms, ratios)."""
    head = (
        f"{'thread':<16}{'saves':>6} | {'save ours':>9}{'lg':>7}{'ours/lg':>8}"
        f" | {'old ld ours':>11}{'lg':>7}{'ours/lg':>8}{'cold':>7}{'/lg':>7}"
        f" | {'latest ours':>11}{'lg':>7}{'ours/lg':>8}"
    )
    print(f"\nAgainst LangGraph PostgresSaver (embedded Postgres)\n{head}\n{'-' * len(head)}")
    for r in [*results, total(results)] if len(results) > 1 else results:
        print(
            f"{r.name[-16:]:<16}{r.saves:>6} | {r.save_ours:>9.2f}{r.save_lg:>7.2f}"
            f"{r.save_ours / r.save_lg:>7.2f}x | {r.load_old:>11.2f}{r.load_lg_old:>7.2f}"
            f"{r.load_old / r.load_lg_old:>7.2f}x{r.load_old_cold:>7.2f}"
            f"{r.load_old_cold / r.load_lg_old:>6.2f}x | {r.load_ours:>11.2f}{r.load_lg:>7.2f}"
            f"{r.load_ours / r.load_lg:>7.2f}x"
        )


@dataclass(frozen=True)
class SummaryJobs:
    name: str
    checkpoints: int
    jobs: int
    per_checkpoint_before: int  # checkpoints past the threshold: one job each before


async def summary_jobs(threads: list[Thread], redis_url: str) -> list[SummaryJobs]:
    """Summary jobs per checkpoint under the default budget (TULIP_SUMMARIZE_OVER_TOKENS
    6000, TULIP_SUMMARY_STEP_TOKENS 1500): the real trigger and (extractive) summary
    worker, a job run as soon as it is enqueued; against one job per checkpoint past
    the threshold (the rule before the step)."""
    from tulip_memory.compactor import estimate_message_tokens
    from tulip_memory.summaries import SummaryBudget, SummaryStore
    from tulip_wire.endpoints import redis_client
    from tulip_workers.summarizer import SummaryScheduler, SummaryTrigger, SummaryWorker

    budget = SummaryBudget()
    out: list[SummaryJobs] = []
    for thread in threads:
        # A job is run right here when the trigger enqueues it (the broker is not measured).
        scheduler = SummaryScheduler(redis_client(redis_url), lambda tenant, thread, token: None)
        checkpointer = DeltaCheckpointer(InMemoryObjectStorage())
        worker = SummaryWorker(checkpointer=checkpointer, scheduler=scheduler)
        worker.step_tokens = budget.step_tokens
        threads_of = worker.threads("bench")
        trigger = SummaryTrigger(budget, scheduler)
        summaries = SummaryStore(threads_of.storage)
        jobs = before = 0
        for state in thread.states:
            await threads_of.save(state, thread.name)
            messages = list(state.messages)
            if sum(estimate_message_tokens(m) for m in messages) > budget.over_tokens:
                before += 1
            if await trigger.checkpointed("bench", thread.name, messages, summaries):
                await worker.run("bench", thread.name)
                jobs += 1
        out.append(SummaryJobs(thread.name, len(thread.states), jobs, before))
    return out


def summary_table(rows: list[SummaryJobs]) -> None:
    head = f"{'thread':<16}{'ckpts':>6} | {'jobs':>5}{'/ckpt':>7} | {'before':>6}{'/ckpt':>7}"
    print(f"\nSummary jobs per checkpoint (default budget)\n{head}\n{'-' * len(head)}")
    total = SummaryJobs(
        "ALL",
        sum(r.checkpoints for r in rows),
        sum(r.jobs for r in rows),
        sum(r.per_checkpoint_before for r in rows),
    )
    for r in [*rows, total] if len(rows) > 1 else rows:
        print(
            f"{r.name[-16:]:<16}{r.checkpoints:>6} | {r.jobs:>5}{r.jobs / r.checkpoints:>7.3f}"
            f" | {r.per_checkpoint_before:>6}{r.per_checkpoint_before / r.checkpoints:>7.3f}"
        )


def total(results: list[Result]) -> Result:
    def med(attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in results))

    return Result(
        name="ALL",
        saves=sum(r.saves for r in results),
        ours=sum(r.ours for r in results),
        full=sum(r.full for r in results),
        seed=sum(r.seed for r in results),
        limit=sum(r.limit for r in results),
        load_ours=med("load_ours"),
        load_seed=med("load_seed"),
        floor=med("floor"),
        load_old=med("load_old"),
        load_old_cold=med("load_old_cold"),
        old_gets=max(r.old_gets for r in results),
        old_trips=max(r.old_trips for r in results),
        save_ours=med("save_ours"),
        save_full=med("save_full"),
        save_seed=med("save_seed"),
        save_lg=med("save_lg"),
        load_lg=med("load_lg"),
        load_lg_old=med("load_lg_old"),
    )


async def sweep(threads: list[Thread], depths: list[int], samples: int) -> None:
    """max_chain_depth: bytes at rest, rewriting, GETs for old loads (memory storage)."""
    print(
        f"\nmax_chain_depth sweep ({len(threads)} threads, in-memory storage; rewrite ="
        f" history bytes written / history bytes at rest)\n"
        f"{'depth':>5} | {'at rest':>8}{'full/ours':>10} | {'written/save':>12}"
        f"{'rewrite':>8} | {'old GETs max':>12}{'p50':>5}{'RT max':>7}\n{'-' * 75}"
    )
    full = sum(len(compressed_state(s)) for t in threads for s in t.states)
    for depth in depths:
        stored = log_stored = written = written_log = saves = trips = 0
        gets: list[int] = []
        for thread in threads:
            inner = InMemoryObjectStorage()
            counted = CountingStorage(inner)
            cp = DeltaCheckpointer(counted, max_chain_depth=depth)
            ids = [await cp.save(s, "t") for s in thread.states]
            saves += len(ids)
            stored += await at_rest(inner, [""])
            log_stored += await at_rest(inner, ["log/"])
            written += counted.written
            written_log += counted.written_log
            for cid in random.Random(3).sample(ids[:-1], min(samples, len(ids) - 1)):
                counted.trips = counted.gets = 0
                await cp.load("t", cid)
                gets.append(counted.gets)
                trips = max(trips, counted.trips)
        print(
            f"{depth:>5} | {kb(stored):>8}{full / stored:>9.1f}x | {kb(written / saves):>12}"
            f"{written_log / max(1, log_stored):>7.1f}x | {max(gets):>12}"
            f"{statistics.median(gets):>5.0f}{trips:>7}"
        )


# -- storage ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def moto_command(port: int) -> tuple[list[str], str]:
    """The command serving moto on ``port``, and what it is.

    moto's own server (werkzeug's) closes every connection after one request, so each
    request pays a TCP connect and a server thread (~2 ms a request here), which no
    client of S3 or MinIO pays: both keep connections alive, as ``PostgresSaver`` keeps
    its connection. When gunicorn is installed in the bench environment, moto's app is
    served by its threaded worker, which keeps them alive; otherwise (or with
    ``BENCH_MOTO_SERVER=moto``) moto's own server is used, and the run says so."""
    host = ["-b", f"127.0.0.1:{port}", "--log-level", "warning"]
    wanted = os.environ.get("BENCH_MOTO_SERVER", "gunicorn")
    if wanted != "moto" and importlib.util.find_spec("gunicorn") is not None:
        options = ["-k", "gthread", "--threads", "16", "-w", "1", "--keep-alive", "75"]
        options += ["--graceful-timeout", "2"]  # the bench's clients are gone by then
        command = [sys.executable, "-m", "gunicorn", *options, *host, "bench._moto_app:app"]
        return command, "moto under gunicorn gthread (connections kept alive, as S3 keeps them)"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return command, "moto.server (a new connection per request: install gunicorn to keep them)"


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a subprocess (its own GIL), stopped on exit (see
    :func:`moto_command`; what it runs is printed)."""
    import boto3

    port = free_port()
    command, what = moto_command(port)
    print(f"S3: {what}", flush=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                boto3.client("s3", endpoint_url=url, region_name="us-east-1").list_buckets()
                break
            except Exception:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # gunicorn waits on kept-alive connections
            proc.kill()
            proc.wait()


@contextmanager
def open_storage(args: argparse.Namespace) -> Iterator[DeltaStorage]:
    if args.storage == "memory":
        yield InMemoryObjectStorage()
    elif args.storage == "file":
        with tempfile.TemporaryDirectory(prefix="tulip-bench-") as d:
            yield FileDeltaStorage(d, fsync=False)
    elif args.endpoint_url:
        yield s3_storage(args.endpoint_url)
    else:
        for var, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
            os.environ.setdefault(var, value)
        with moto_server() as url:
            yield s3_storage(url)


def s3_storage(url: str) -> S3DeltaStorage:
    import boto3

    bucket = f"tulip-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket=bucket)
    return S3DeltaStorage(bucket, "bench", endpoint_url=url, region_name="us-east-1")


# -- main ------------------------------------------------------------------------------


def threads_from(args: argparse.Namespace) -> list[Thread]:
    if args.dataset:
        paths = sorted(Path(p) for pattern in args.dataset for p in glob.glob(pattern))
        if not paths:
            raise SystemExit(f"no files match {args.dataset}")
        return [locomo_thread(p) for p in paths]
    return [synthetic_thread(seed, args.turns) for seed in range(args.threads)]


async def main_async(args: argparse.Namespace) -> None:
    threads = threads_from(args)
    source = "LoCoMo" if args.dataset else f"synthetic agent threads ({args.turns} turns)"
    with contextlib.ExitStack() as stack:
        saver = stack.enter_context(langgraph_saver()) if args.langgraph else None
        storage = stack.enter_context(open_storage(args))
        results = (
            []
            if args.skip_storage
            else [await bench_thread(storage, t, args.depth, args.loads, saver) for t in threads]
        )
        await storage.close()
    if results:
        table(
            f"{source}: one save per turn, max_chain_depth={args.depth}, zlib 6, "
            f"{args.storage} storage; sizes in KiB, times p50 in ms; ALL = sums, medians",
            results,
        )
    if args.langgraph and results:
        langgraph_table(results)
    if args.summaries:
        from tulip_ops.dev.embedded import EmbeddedRedis

        with tempfile.TemporaryDirectory(prefix="tulip-bench-redis-") as d:
            server = EmbeddedRedis(Path(d) / "redis")
            try:
                summary_table(await summary_jobs(threads, server.start().url))
            finally:
                server.stop()
    if args.wire:
        from bench.wire import wire_runs, wire_table

        wire_table(wire_runs(threads))
    if args.sweep:
        await sweep(threads, [int(d) for d in args.sweep.split(",")], max(60, args.loads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", action="append", help="LoCoMo JSON files (glob)")
    parser.add_argument("--threads", type=int, default=3, help="synthetic threads")
    parser.add_argument("--turns", type=int, default=400, help="turns per synthetic thread")
    parser.add_argument("--depth", type=int, default=5, help="max_chain_depth")
    parser.add_argument("--loads", type=int, default=30, help="loads timed per thread")
    parser.add_argument("--storage", choices=["s3", "file", "memory"], default="s3")
    parser.add_argument("--endpoint-url", help="an S3 endpoint instead of a moto subprocess")
    parser.add_argument("--sweep", default="", help="depths to compare, e.g. 1,2,5,10")
    parser.add_argument("--summaries", action="store_true", help="also summary jobs per checkpoint")
    parser.add_argument(
        "--wire", action="store_true", help="also bytes on the wire per checkpoint_saved"
    )
    parser.add_argument("--skip-storage", action="store_true", help="only the extra tables")
    parser.add_argument(
        "--langgraph",
        action="store_true",
        help="also LangGraph's PostgresSaver (needs langgraph-checkpoint-postgres installed)",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
