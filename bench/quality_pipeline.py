"""LoCoMo through the real pipeline: ``python -m bench.recall_quality --mode pipeline``.

Every conversation is imported with ``tulip-memory import``'s code (:mod:`tulip_ops.backfill`)
into real ``celery worker`` shard processes running the offline extractor and the hashing
encoder: each speaker is a user with a namespace of their own (their messages role
``user``, the other's ``assistant``, both named), one event per session, the session's
date as the messages' time, the data set's dia ids as message ids. Measured:

- **messages indexed**: the fraction of the data set's messages found as a side of a
  stored turn of their speaker's namespace (each should be, exactly once);
- **turn hit@k**: a question counts at k when one of its evidence messages is a side of
  one of the top k turns ``Reader.recall_turns`` returns in the first speaker's
  namespace (it holds every message of the conversation); per category too;
- **memory answer@10**: the data set's answer string (lower case, punctuation and
  extra spaces removed) is part of one of the 10 memories ``Reader.recall`` returns;
- **memory evidence@10**: one of those 10 memories names an evidence message among its
  ``source_ids``. Memories are recalled in the namespace of the speaker the question
  names (of both, 5 each, when it names neither or both);
- **import rate**, and the latency of live events (another namespace, published one by
  one during the import, then again with the pipeline idle): publish to applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from bench._services import BenchError, Services, WorkerPool, open_services, progress
from bench.locomo import KS, Conversation, Question, turn_text
from tulip_memory.config import store_from_env
from tulip_memory.manager import Memory
from tulip_memory.messages import Message, Role
from tulip_memory.turns import TurnHit
from tulip_ops.backfill import Pacer, StateFile, parse_line, run, session_event
from tulip_ops.provision import configured_store, migrate_now
from tulip_producer import Producer
from tulip_producer.reader import AsyncReader

LIVE_EVERY = 1.0
POLL = 0.02


@dataclass
class PipelineResult:
    messages: int = 0
    indexed: int = 0
    duplicated: int = 0
    turns: int = 0
    memories: int = 0
    #: Per question of every conversation (same order as the data set).
    turn_ranks: list[int | None] = field(default_factory=list)
    categories: list[int] = field(default_factory=list)
    answer_hits: list[bool] = field(default_factory=list)  # questions with an answer
    evidence_hits: list[bool] = field(default_factory=list)
    sample_memories: list[tuple[str, Memory]] = field(default_factory=list)
    events: int = 0
    import_seconds: float = 0.0
    live_busy: list[float] = field(default_factory=list)
    live_idle: list[float] = field(default_factory=list)


def namespace(conv: Conversation, speaker: str) -> tuple[str, ...]:
    return (f"locomo-{conv.sample}", re.sub(r"[^a-z0-9]+", "-", speaker.lower()).strip("-"))


def history(convs: Sequence[Conversation], path: Path) -> None:
    """The data set as ``tulip-memory import`` reads it: one line per speaker."""
    with path.open("w") as out:
        for conv in convs:
            for speaker in conv.speakers:
                sessions = []
                for number in sorted(conv.dates):
                    said = [t for t in conv.turns if t.session == number]
                    messages = [
                        {
                            "role": "user" if t.speaker == speaker else "assistant",
                            "content": turn_text(t, "caption"),
                            "name": t.speaker,
                            "id": t.dia_id,
                        }
                        for t in said
                    ]
                    if messages:
                        sessions.append({"timestamp": conv.dates[number], "messages": messages})
                line = {
                    "namespace": list(namespace(conv, speaker)),
                    "thread_id": f"locomo-{conv.sample}",
                    "sessions": sessions,
                }
                out.write(json.dumps(line) + "\n")


def event_ids(path: Path) -> list[str]:
    ids = []
    for text in path.read_text().splitlines():
        conv = parse_line(text)
        ids += [session_event(conv, k, ts=0.0).id for k in range(len(conv.sessions))]
    return ids


class Ledger:
    """Applied events, read with the administrator's connection."""

    def __init__(self, admin_dsn: str) -> None:
        self._dsn = admin_dsn

    async def applied(self, conn: Any, ids: list[str]) -> int:
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM tulip_event_ledger"
                    " WHERE event_id = ANY($1) AND status = 'applied'",
                    ids,
                )
            )
        except asyncpg.UndefinedTableError:
            return 0

    async def wait(self, ids: list[str], seconds: float, pool: WorkerPool) -> float:
        """When every one of ``ids`` was applied (``time.monotonic``)."""
        conn = await asyncpg.connect(self._dsn)
        try:
            deadline = time.monotonic() + seconds
            while (done := await self.applied(conn, ids)) < len(ids):
                if time.monotonic() > deadline:
                    raise BenchError(f"{done} of {len(ids)} events applied after {seconds:.0f}s")
                pool.check()
                await asyncio.sleep(0.2)
            return time.monotonic()
        finally:
            await conn.close()


class LiveTraffic:
    """One live event at a time in namespaces of their own; each one's publish-to-applied."""

    def __init__(self, producer: Producer, admin_dsn: str) -> None:
        self._producer, self._dsn = producer, admin_dsn
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> LiveTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    async def _run(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        ledger = Ledger(self._dsn)
        try:
            n = 0
            while not self._stop.is_set():
                n += 1
                said = [Message(role=Role.USER, content=f"My lucky number is {n}.")]
                started = time.monotonic()
                event = self._producer.session_ended(("live", "users", f"u{n % 4}"), "live", said)
                await _applied(ledger, conn, event)
                self.latencies.append(time.monotonic() - started)
                self._stop.wait(LIVE_EVERY)
        finally:
            await conn.close()


async def _applied(ledger: Ledger, conn: Any, event: str) -> None:
    """Back when the ledger has ``event`` applied (polled every ``POLL`` seconds)."""
    while await ledger.applied(conn, [event]) < 1:  # noqa: ASYNC110 - the ledger is polled
        await asyncio.sleep(POLL)


def worker_env(services: Services, table: str, shards: int) -> dict[str, str]:
    import os

    inherited = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    url = services.broker_url
    return {
        **inherited,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TULIP_BROKER_URL": url,
        "TULIP_REDIS_URL": url,
        "TULIP_DATABASE_URL": services.app_dsn,
        "TULIP_MEMORY_TABLE": table,
        "TULIP_EXTRACT_SHARDS": str(shards),
        "TULIP_MAX_MEMORIES": "100000",  # the bench keeps every memory (no pruning)
        "TULIP_SPOOL_DIR": str(services.tmp / "worker-spool"),
    }


def run_pipeline(
    stack: contextlib.ExitStack,
    convs: list[Conversation],
    *,
    admin_dsn: str | None,
    broker_url: str | None,
    shards: int,
    max_backlog: int,
    seed: int,
) -> tuple[PipelineResult, Services]:
    services = open_services(stack, admin_dsn, broker_url, prefix="tulip-bench-quality-")
    table = f"bench_quality_{random.Random(seed).randrange(16**8):08x}"
    env = worker_env(services, table, shards)
    migrate_now(configured_store(services.admin_dsn, env))  # as the owner, before any worker
    result = PipelineResult()
    source = services.tmp / "locomo.jsonl"
    history(convs, source)
    ids = event_ids(source)
    result.events = len(ids)
    ledger = Ledger(services.admin_dsn)
    producer = Producer.from_urls(
        services.broker_url,
        services.broker_url,
        spool_dir=services.tmp / "spool",
        extract_shards=shards,
    )
    stack.callback(producer.close)
    with WorkerPool(services.tmp / "logs", env) as pool:
        for k in range(shards):
            pool.start("tulip_workers.app", f"extract-{k}", f"memory.extract.{k}")
        progress(f"{shards} extraction workers; importing {len(ids)} sessions ...")
        with LiveTraffic(producer, services.admin_dsn) as live:
            started = time.monotonic()
            state = StateFile(services.tmp / "locomo.state", source)
            summary = run(source, producer, state, Pacer(producer, max_backlog=max_backlog))
            finished = asyncio.run(ledger.wait(ids, 3600, pool))
            result.import_seconds = finished - started
        result.live_busy = live.latencies
        progress(
            f"imported {summary.events} events in {result.import_seconds:.1f}s; "
            f"{len(result.live_busy)} live events meanwhile; now the idle run ..."
        )
        with LiveTraffic(producer, services.admin_dsn) as idle:
            deadline = time.monotonic() + max(30.0, LIVE_EVERY * (len(result.live_busy) + 1))
            while len(idle.latencies) < max(5, len(result.live_busy)) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.2)
        result.live_idle = idle.latencies
        asyncio.run(measure(result, convs, services, env, seed))
    return result, services


async def measure(
    result: PipelineResult,
    convs: list[Conversation],
    services: Services,
    env: dict[str, str],
    seed: int,
) -> None:
    reader = AsyncReader(store_from_env(env))
    conn = await asyncpg.connect(services.admin_dsn)
    try:
        await _coverage(result, convs, conn, env["TULIP_MEMORY_TABLE"])
        every: list[tuple[str, Memory]] = []
        for conv in convs:
            spaces = {s: namespace(conv, s) for s in conv.speakers}
            for ns in spaces.values():
                every += [(ns[1], m) for m in await reader.recall(ns, None, limit=100_000)]
            for q in conv.questions:
                await _ask(result, reader, conv, spaces, q)
        result.memories = len(every)
        result.sample_memories = random.Random(seed).sample(every, min(50, len(every)))
    finally:
        await conn.close()
        await reader.close()


async def _coverage(
    result: PipelineResult, convs: list[Conversation], conn: Any, table: str
) -> None:
    for conv in convs:
        for speaker in conv.speakers:
            ns = "\x1f".join(namespace(conv, speaker))
            rows = await conn.fetch(f"SELECT turn FROM public.{table}_turns WHERE ns = $1", ns)
            seen: list[str] = []
            for row in rows:
                turn = json.loads(row["turn"])
                seen += [s["metadata"]["id"] for s in _sides(turn) if "id" in s["metadata"]]
            wanted = {t.dia_id for t in conv.turns}
            result.messages += len(wanted)
            result.indexed += len(wanted & set(seen))
            result.duplicated += len(seen) - len(set(seen))
            result.turns += len(rows)


def _sides(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [turn, *([turn["reply"]] if "reply" in turn else [])]


def _ids(hit: TurnHit) -> set[str]:
    return {s["metadata"].get("id") for s in _sides(hit.turn)} - {None}


async def _ask(
    result: PipelineResult,
    reader: AsyncReader,
    conv: Conversation,
    spaces: dict[str, tuple[str, ...]],
    q: Question,
) -> None:
    first = spaces[conv.speakers[0]]
    hits = await reader.recall_turns(first, q.text, top_k=max(KS))
    found = [i for i, h in enumerate(hits, 1) if _ids(h) & q.evidence]
    result.turn_ranks.append(found[0] if found else None)
    result.categories.append(q.category)
    named = [s for s in conv.speakers if re.search(rf"\b{re.escape(s)}\b", q.text)]
    targets = named if len(named) == 1 else list(conv.speakers)
    per = 10 // len(targets)
    memories = [m for s in targets for m in await reader.recall(spaces[s], q.text, limit=per)]
    if q.answer is not None:
        answer = normalize(q.answer)
        result.answer_hits.append(
            bool(answer) and any(answer in normalize(m.content) for m in memories)
        )
    sources = {i for m in memories for i in m.metadata.get("source_ids", [])}
    result.evidence_hits.append(bool(sources & q.evidence))


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


def hit_rate(ranks: Sequence[int | None], k: int) -> float:
    return sum(1 for r in ranks if r is not None and r <= k) / max(1, len(ranks))


def latency_line(label: str, seconds: Sequence[float]) -> str:
    if not seconds:
        return f"{label:28} (none)"
    ms = np.asarray(seconds) * 1000
    return (
        f"{label:28} {len(ms):5d} {np.percentile(ms, 50):8.0f} {np.percentile(ms, 95):8.0f}"
        f" {ms.max():8.0f}"
    )
