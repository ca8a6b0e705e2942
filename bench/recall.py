"""PgMemory recall at scale: skewed namespaces, beside LangGraph's PostgresStore.

Fills one table with ``--rows`` memories over ``--namespaces`` namespaces whose sizes
follow Zipf's law (the largest holds ``--largest``), ten namespaces per tenant, and a
turns table with one namespace of ``--turns`` turns beside 200 small ones (vectors
from the hashing embedder, ``--dim`` wide). The same memories go into LangGraph's
``PostgresStore`` (its ``store`` and ``store_vectors`` tables, its HNSW index) in the
same database. Then, per size class of namespace, queries made of four words of one
of the namespace's rows measure:

- p50 / p99 latency of ``PgMemory.search`` (the plan the store picks) and of
  ``PostgresStore.search``, and their ratio;
- completeness: the share of queries answered with ``min(10, rows)`` results;
- recall@10 of the store's answer against its exact path (``recall_plan="exact"``),
  run for every query before the timed ones: an exact scan of a big namespace passes
  its rows through the server's buffers and would evict the indexes the next timed
  query reads;
- self-hit@10: the query's source row among the top 10, for the store, its exact
  path and ``PostgresStore``.

and the same for ``search_turns`` (``Reader.recall_turns``) on the turns table.

Usage: python -m bench.recall [--full] [--rows 100000] [--namespaces 1000]
    [--largest 50000] [--turns 50000] [--queries 40] [--warm 0] [--admin-dsn DSN] [--reuse]
    [--turn-texts '../shared/data/locomo10/*.json'] [--nearest] [--graphs N]

After the load (and on ``--reuse``) the big namespaces get graphs of their own, as the
operator's ``tulip-memory graphs`` leaves them (:mod:`tulip_memory.reindex.graphs`);
``--graphs 0`` drops them, so the table's graph alone is measured. ``--warm N`` runs N
other queries a class, untimed, between the exact pass and the timed queries, for
both stores: the exact pass reads every row of each namespace through the buffers
and evicts pages a server in use keeps, and without it the first timed queries pay
for that.

``--nearest`` also times the index path's two ways to a namespace's nearest rows (the
HNSW graph, the scan of the namespace's own rows) on namespaces of every size, beside
the way ``plan.choose`` takes: what its constants were fitted on.

The bench's sentences draw their words uniformly from 3,000, so no word is common and a
query of four matches ~1% of a namespace's rows. Real words are not uniform: four
words of a LoCoMo turn match ~15% (p50; p90 ~30%), and the lexical side of the index
path costs what its query matches. ``--turn-texts`` fills the turns table with the
utterances of LoCoMo conversations instead (drawn at random, each with one bench word
after it, so that the copies of an utterance are distinct rows to the HNSW graph;
queries are drawn from the utterance).

``--full`` is the size users have (1,000,000 rows over 10,000 namespaces, the largest
100,000, a 200,000-turn namespace); loading it took 25 minutes on two shared cores
(most of it the three HNSW builds), so with ``--admin-dsn`` the tables stay, and a
later run with ``--reuse`` measures the rows already there (the queries are picked
from them again).
LangGraph runs only where ``langgraph-checkpoint-postgres`` is installed (a bench
environment of its own, never a dependency of tulip-memory); without it the peer
columns are left empty. Without ``--admin-dsn`` it runs on an embedded Postgres in a
temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
from pgvector import Vector

from bench._services import open_services
from tulip_memory.embeddings.hashing import HashingEmbedder
from tulip_memory.reindex import graphs
from tulip_memory.reindex.graphs import Graphs
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres import plan, slots, sql
from tulip_memory.store.postgres.render import render
from tulip_memory.store.validation import NS_SEP

TABLE = "bench_recall"
VOCAB = [f"w{i}" for i in range(3000)]
CLASSES = ((100_000, "100k+"), (10_000, "10k-100k"), (1_000, "1k-10k"), (100, "100-1k"),
           (10, "10-100"), (1, "1-10"))  # fmt: skip
LIMIT = 10
SMALL_TURN_NAMESPACES = 200


def zipf_sizes(rows: int, namespaces: int, largest: int) -> list[int]:
    """``namespaces`` sizes, the i-th ~ largest / i^s, s chosen so they sum to ~rows."""
    ranks = np.arange(1, namespaces + 1, dtype=np.float64)
    lo, hi = 0.01, 4.0
    for _ in range(60):
        s = (lo + hi) / 2
        total = np.maximum(1, np.round(largest / ranks**s)).sum()
        lo, hi = (lo, s) if total < rows else (s, hi)
    return [int(x) for x in np.maximum(1, np.round(largest / ranks ** ((lo + hi) / 2)))]


def size_class(rows: int) -> str:
    return next(name for floor, name in CLASSES if rows >= floor)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCAB, k=rng.randint(6, 12)))


def utterances(pattern: str) -> list[str]:
    """Every turn's text of the LoCoMo conversations ``pattern`` matches."""
    from bench.locomo import dataset_paths, load

    return [t.text for c in load(dataset_paths(pattern)) for t in c.turns if t.text.strip()]


def turn_text(rng: random.Random, texts: list[str] | None) -> tuple[str, str]:
    """A turn's text and the words its queries are drawn from: a synthetic sentence, or
    a real utterance with one bench word after it (so the many copies of an utterance
    are not one point to the HNSW graph), its queries drawn from the utterance."""
    if texts is None:
        text = sentence(rng)
        return text, text
    said = rng.choice(texts)
    return f"{said} {rng.choice(VOCAB)}", said


@dataclass
class Corpus:
    """Namespaces (as tuples) with their sizes, and the text of a few rows of each
    (the queries' sources)."""

    sizes: dict[tuple[str, ...], int] = field(default_factory=dict)
    samples: dict[tuple[str, ...], list[tuple[str, str]]] = field(default_factory=dict)


def memory_namespaces(sizes: list[int]) -> Iterator[tuple[tuple[str, ...], int]]:
    for i, n in enumerate(sizes):
        yield (f"t{i // 10}", "facts", f"n{i}"), n


def turn_namespaces(turns: int) -> Iterator[tuple[tuple[str, ...], int]]:
    yield ("heavy", "turns", "u0"), turns
    for i in range(SMALL_TURN_NAMESPACES):
        yield (f"t{i}", "turns", "u0"), 1 + (i * 37) % 200


async def _vector_codec(conn: Any) -> None:
    await conn.set_type_codec(
        "vector",
        encoder=lambda v: Vector(v).to_binary(),
        decoder=Vector.from_binary,
        format="binary",
        schema="public",
    )


async def load(
    admin_dsn: str, args: argparse.Namespace, emb: HashingEmbedder, peer: bool
) -> tuple[Corpus, Corpus]:
    """COPY every row in (indexes built after, as an operator loads a table this
    size); the store's counters fill through its triggers."""
    rng = random.Random(1)
    memories, turns = Corpus(), Corpus()
    conn = await asyncpg.connect(admin_dsn)
    try:
        await _vector_codec(conn)
        if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM public.{TABLE} LIMIT 1)"):
            if not args.reuse:
                raise SystemExit(f"{TABLE} holds rows already: pass --reuse to measure them")
            print("  --reuse: measuring the rows already loaded", flush=True)
            return await _read_back(conn, TABLE, memories), await _read_back(
                conn, f"{TABLE}_turns", turns, said=args.turn_texts is not None
            )
        drop = f"public.{TABLE}_hnsw, public.{TABLE}_turns_hnsw"
        await conn.execute(f"DROP INDEX IF EXISTS {drop}")
        if peer:
            await conn.execute("DROP INDEX IF EXISTS store_vectors_embedding_idx")
        batch: list[tuple[str, str, str, str]] = []
        sizes = zipf_sizes(args.rows, args.namespaces, args.largest)
        for ns, n in memory_namespaces(sizes):
            memories.sizes[ns] = n
            for i in range(n):
                batch.append((ns[0], NS_SEP.join(ns), f"k{i}", sentence(rng)))
            if len(batch) >= 20_000:
                await _copy_memories(conn, batch, emb, peer, memories)
                batch = []
        if batch:
            await _copy_memories(conn, batch, emb, peer, memories)
        start = datetime(2025, 1, 1, tzinfo=UTC)
        texts = utterances(args.turn_texts) if args.turn_texts else None
        for ns, n in turn_namespaces(args.turns):
            turns.sizes[ns] = n
            for lo in range(0, n, 20_000):
                rows = [
                    (ns[0], NS_SEP.join(ns), i, *turn_text(rng, texts))
                    for i in range(lo, min(n, lo + 20_000))
                ]
                await _copy_turns(conn, rows, emb, start, turns)
        await _build_indexes(conn, peer, args.dim)
    finally:
        await conn.close()
    return memories, turns


async def _read_back(conn: Any, table: str, corpus: Corpus, said: bool = False) -> Corpus:
    """A loaded table's namespace sizes (its counters) and its first rows by key
    (``said``: the turns are utterances with a word after them, which queries skip,
    as :func:`turn_text`)."""
    for r in await conn.fetch(f"SELECT ns, rows FROM public.{table}_ns_stats WHERE rows > 0"):
        corpus.sizes[tuple(r["ns"].split(NS_SEP))] = int(r["rows"])
    turns = table.endswith("_turns")
    key, text = ("position || ':' || text", "text") if turns else ("key", "content")
    order = "event_id, position" if turns else "key"
    rows = await conn.fetch(
        f"SELECT ns, k, c FROM (SELECT ns, {key} AS k, {text} AS c, row_number() OVER"
        f" (PARTITION BY ns ORDER BY {order}) AS rn FROM public.{table}) x WHERE rn <= 8"
    )
    for r in rows:
        words = r["c"].rsplit(" ", 1)[0] if said and turns else r["c"]
        corpus.samples.setdefault(tuple(r["ns"].split(NS_SEP)), []).append((r["k"], words))
    return corpus


async def _copy_memories(
    conn: Any, batch: list[tuple[str, str, str, str]], emb: HashingEmbedder, peer: bool,
    corpus: Corpus,
) -> None:  # fmt: skip
    vectors = emb.embed([r[3] for r in batch])
    await conn.copy_records_to_table(
        TABLE,
        schema_name="public",
        records=[(t, ns, k, json.dumps(c), c, vectors[i]) for i, (t, ns, k, c) in enumerate(batch)],
        columns=["tenant", "ns", "key", "value", "content", "embedding"],
    )
    for _t, ns, k, c in batch:
        sample = corpus.samples.setdefault(tuple(ns.split(NS_SEP)), [])
        if len(sample) < 8:
            sample.append((k, c))
    if peer:
        rows = [(".".join(ns.split(NS_SEP)), k, c) for _, ns, k, c in batch]
        await conn.copy_records_to_table(
            "store",
            records=[(p, k, json.dumps({"text": c})) for p, k, c in rows],
            columns=["prefix", "key", "value"],
        )
        await conn.copy_records_to_table(
            "store_vectors",
            records=[(p, k, "text", vectors[i]) for i, (p, k, _) in enumerate(rows)],
            columns=["prefix", "key", "field_name", "embedding"],
        )


async def _copy_turns(
    conn: Any, rows: list[tuple[str, str, int, str, str]], emb: HashingEmbedder,
    start: datetime, corpus: Corpus,
) -> None:  # fmt: skip
    vectors = emb.embed([r[3] for r in rows])
    records = [
        (t, ns, "th", f"e{i // 100}", i % 100, text, json.dumps({"user": text}), vectors[j],
         i, start + timedelta(minutes=i))
        for j, (t, ns, i, text, _) in enumerate(rows)
    ]  # fmt: skip
    await conn.copy_records_to_table(
        f"{TABLE}_turns",
        schema_name="public",
        records=records,
        columns=["tenant", "ns", "thread_id", "event_id", "position", "text", "turn",
                 "embedding", "source_seq", "created_at"],
    )  # fmt: skip
    for _t, ns, i, text, said in rows:
        sample = corpus.samples.setdefault(tuple(ns.split(NS_SEP)), [])
        if len(sample) < 8:
            sample.append((f"{i % 100}:{text}", said))


async def _build_indexes(conn: Any, peer: bool, dim: int) -> None:
    await conn.execute("SET maintenance_work_mem = '2GB'")
    await conn.execute("SET max_parallel_maintenance_workers = 2")
    ours = slots.ann_using(slots.ORIGINAL_SLOT, dim)  # the store's own index, as migrated
    todo = [
        (f"{TABLE}_hnsw", f"public.{TABLE}", ours),
        (f"{TABLE}_turns_hnsw", f"public.{TABLE}_turns", ours),
    ]
    if peer:  # PostgresStore's, as its setup creates it
        theirs = "USING hnsw (embedding vector_cosine_ops)"
        todo.append(("store_vectors_embedding_idx", "store_vectors", theirs))
    for index, table, using in todo:
        started = time.perf_counter()
        await conn.execute(f"CREATE INDEX {index} ON {table} {using}")
        print(f"  {index} built in {time.perf_counter() - started:.1f}s", flush=True)
        await conn.execute(f"ANALYZE {table}")


@dataclass
class Query:
    namespace: tuple[str, ...]
    rows: int
    text: str
    source: str


def pick_queries(corpus: Corpus, per_class: int, rng: random.Random) -> list[Query]:
    by_class: dict[str, list[tuple[str, ...]]] = {}
    for ns, n in corpus.sizes.items():
        by_class.setdefault(size_class(n), []).append(ns)
    out = []
    for _, name in CLASSES:
        pool = by_class.get(name, [])
        for i in range(per_class if pool else 0):
            ns = pool[i % len(pool)] if len(pool) < per_class else rng.choice(pool)
            key, text = rng.choice(corpus.samples[ns])
            words = text.split()
            query = " ".join(rng.sample(words, min(4, len(words))))
            out.append(Query(ns, corpus.sizes[ns], query, key))
    return out


@dataclass
class Answer:
    ms: float
    keys: list[str]


async def timed(answer: Awaitable[list[str]]) -> Answer:
    """The time of awaiting ``answer`` (a coroutine runs only once awaited)."""
    started = time.perf_counter()
    keys = await answer
    return Answer((time.perf_counter() - started) * 1000, keys)


@dataclass
class Row:
    """One size class's figures."""

    queries: int = 0
    tulip: list[float] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)
    complete: int = 0
    peer_complete: int = 0
    overlap: int = 0
    wanted: int = 0
    self_hits: Counter[str] = field(default_factory=Counter)
    plans: Counter[str] = field(default_factory=Counter)


async def measure_memories(
    app_dsn: str, peer_store: Any, queries: list[Query], emb: HashingEmbedder, warm: list[Query]
) -> dict[str, Row]:
    auto = PgMemory(app_dsn, table=TABLE, embedder=emb, encoding_cache=0)
    exact = PgMemory(app_dsn, table=TABLE, embedder=emb, encoding_cache=0, recall_plan="exact")
    await auto.search(queries[0].namespace, "warm")  # the pool, the server's capabilities
    await exact.search(queries[0].namespace, "warm")
    rows: dict[str, Row] = {}
    try:
        wanted = [await _keys(exact.search(q.namespace, q.text, limit=LIMIT)) for q in queries]
        for q in warm:
            await auto.search(q.namespace, q.text, limit=LIMIT)
            if peer_store is not None:
                await _peer_search(peer_store, q)
        for q, want in zip(queries, wanted, strict=True):
            row = rows.setdefault(size_class(q.rows), Row())
            before = auto.plans.copy()
            got = await timed(_keys(auto.search(q.namespace, q.text, limit=LIMIT)))
            row.plans += auto.plans - before
            _score(row, q, got, want)
            if peer_store is not None:
                theirs = await timed(_peer_search(peer_store, q))
                row.peer.append(theirs.ms)
                row.peer_complete += len(theirs.keys) == min(LIMIT, q.rows)
                row.self_hits["peer"] += q.source in theirs.keys
    finally:
        await auto.close()
        await exact.close()
    return rows


async def measure_turns(
    app_dsn: str, queries: list[Query], emb: HashingEmbedder, warm: list[Query]
) -> dict[str, Row]:
    auto = PgMemory(app_dsn, table=TABLE, embedder=emb, encoding_cache=0)
    exact = PgMemory(app_dsn, table=TABLE, embedder=emb, encoding_cache=0, recall_plan="exact")
    rows: dict[str, Row] = {}

    async def turn_keys(store: PgMemory, q: Query) -> list[str]:
        hits = await store.search_turns(q.namespace, q.text, top_k=LIMIT)
        return [f"{h.position}:{h.text}" for h in hits]

    # The pools and the server's capabilities, outside the timed calls (as for memories).
    await auto.search_turns(queries[0].namespace, "warm", top_k=1)
    await exact.search_turns(queries[0].namespace, "warm", top_k=1)
    try:
        wanted = [await turn_keys(exact, q) for q in queries]
        for q in warm:
            await turn_keys(auto, q)
        for q, want in zip(queries, wanted, strict=True):
            row = rows.setdefault(size_class(q.rows), Row())
            before = auto.plans.copy()
            got = await timed(turn_keys(auto, q))
            row.plans += auto.plans - before
            _score(row, q, got, want)
    finally:
        await auto.close()
        await exact.close()
    return rows


def _score(row: Row, q: Query, got: Answer, want: list[str]) -> None:
    row.queries += 1
    row.tulip.append(got.ms)
    row.complete += len(got.keys) == min(LIMIT, q.rows)
    row.overlap += len(set(got.keys) & set(want))
    row.wanted += len(want)
    row.self_hits["tulip"] += q.source in got.keys
    row.self_hits["exact"] += q.source in want


async def _keys(results: Awaitable[list[Any]]) -> list[str]:
    return [item.key for item in await results]


async def _peer_search(store: Any, q: Query) -> list[str]:
    hits = await asyncio.to_thread(store.search, q.namespace, query=q.text, limit=LIMIT)
    return [h.key for h in hits]


# The index path's nearest rows alone, each way (``sql.nearest``), as the app role.
_NEAR = "SELECT 1 FROM {t} WHERE tenant = $1 AND ns = $2 AND $3::int > 0{g} ORDER BY {n} LIMIT $3"
_HAS_GRAPH = f"""SELECT EXISTS (SELECT 1 FROM public.{TABLE}_graphs
    WHERE kind = $1 AND tenant = $2 AND ns = $3 AND ready)"""


async def measure_nearest(
    app_dsn: str, table: str, corpus: Corpus, emb: HashingEmbedder, per: int
) -> None:
    """For the namespaces of at least ``plan.INDEX_MIN_ROWS`` rows (up to two a
    doubling of size): the median time of the index path's ``per`` nearest-row reads
    from the table's HNSW graph, from the namespace's own graph (where it has one) and
    from the scope's scan, and the way ``plan.choose`` takes, so that its constants can
    be checked against this host and these rows."""
    import asyncpg
    from pgvector.asyncpg import register_vector

    conn = await asyncpg.connect(app_dsn)
    await register_vector(conn)
    table_rows = await plan.TableRows().get(conn, f"public.{table}")
    picked: dict[int, list[tuple[str, ...]]] = {}
    for ns, n in sorted(corpus.sizes.items(), key=lambda x: -x[1]):
        if n >= plan.INDEX_MIN_ROWS and len(picked.setdefault(n.bit_length(), [])) < 2:
            picked[n.bit_length()].append(ns)
    candidates, _ = plan.index_args(LIMIT)
    print(f"\nthe nearest {candidates} rows of {table} ({table_rows:,.0f} rows), median ms")
    print(f"{'rows':>8} {'share':>7} {'graph':>7} {'own':>7} {'scan':>7}  chosen (faster)")
    kind = "turns" if table.endswith("_turns") else "memories"
    try:
        near = render(_NEAR, t=f"public.{table}")
        statements = {
            way: slots.read_sql(sql.nearest(near, way), "embedding", emb.dimension)
            for way in (plan.INDEX, plan.OWN, plan.SCAN)
        }
        for ns in [ns for group in picked.values() for ns in group]:
            vectors = emb.embed([text for _, text in corpus.samples[ns][:per]])
            async with conn.transaction():
                await conn.execute(sql.PIN_TENANT, ns[0])
                own = await conn.fetchval(_HAS_GRAPH, kind, ns[0], NS_SEP.join(ns))
            times = {}
            for way, statement in statements.items():
                if way == plan.OWN and not own:
                    continue
                spent = []
                for vector in vectors:
                    async with conn.transaction():
                        await conn.execute(sql.PIN_TENANT, ns[0])
                        await conn.execute(
                            sql.PLAN_SETTINGS, str(plan.ef_search(LIMIT)), str(plan.MAX_SCAN_TUPLES)
                        )
                        started = time.perf_counter()
                        await conn.fetch(statement, ns[0], NS_SEP.join(ns), candidates, vector)
                        spent.append((time.perf_counter() - started) * 1000)
                times[way] = float(np.median(spent))
            n = corpus.sizes[ns]
            chosen = plan.choose(n, table_rows, LIMIT, own=own)
            faster = min(times, key=times.__getitem__)
            mine = f"{times[plan.OWN]:7.2f}" if own else f"{'-':>7}"
            print(
                f"{n:8,} {n / table_rows:7.2%} {times[plan.INDEX]:7.2f} {mine}"
                f" {times[plan.SCAN]:7.2f}  {chosen} ({faster})"
            )
    finally:
        await conn.close()


def report(title: str, rows: dict[str, Row], peer: bool) -> None:
    print(f"\n{title}")
    head = f"{'class':>9} {'n':>4} {'tulip p50':>9} {'p99':>7}"
    if peer:
        head += f" {'LG p50':>7} {'p99':>7} {'p50 ratio':>9}"
    head += f" {'complete':>8}"
    head += f" {'LG compl':>8}" if peer else ""
    head += f" {'recall@10':>9} {'self@10 tulip/exact':>20}"
    head += f" {'LG self':>7}" if peer else ""
    head += "  plans"
    print(head)
    for _, name in CLASSES:
        r = rows.get(name)
        if r is None or not r.queries:
            continue
        p50, p99 = np.percentile(r.tulip, 50), np.percentile(r.tulip, 99)
        line = f"{name:>9} {r.queries:4d} {p50:9.2f} {p99:7.2f}"
        if peer:
            q50, q99 = np.percentile(r.peer, 50), np.percentile(r.peer, 99)
            line += f" {q50:7.2f} {q99:7.2f} {p50 / q50:9.2f}"
        line += f" {r.complete / r.queries:8.0%}"
        line += f" {r.peer_complete / r.queries:8.0%}" if peer else ""
        selfs = f"{r.self_hits['tulip'] / r.queries:.2f} / {r.self_hits['exact'] / r.queries:.2f}"
        line += f" {r.overlap / max(1, r.wanted):9.3f} {selfs:>20}"
        line += f" {r.self_hits['peer'] / r.queries:7.2f}" if peer else ""
        line += "  " + ", ".join(f"{k} {v}" for k, v in sorted(r.plans.items()))
        print(line)


@contextlib.contextmanager
def peer_store(admin_dsn: str, emb: HashingEmbedder) -> Iterator[Any]:
    """LangGraph's PostgresStore over the same database, or None where it is not
    installed."""
    try:
        peer = importlib.import_module("langgraph.store.postgres")
    except ImportError:
        print("langgraph-checkpoint-postgres is not installed: no PostgresStore columns")
        yield None
        return
    index = {"dims": emb.dimension, "embed": lambda texts: emb.embed(texts).tolist(),
             "fields": ["text"]}  # fmt: skip
    with peer.PostgresStore.from_conn_string(admin_dsn, index=index) as store:
        store.setup()
        yield store


async def own_graphs(app_dsn: str, admin_dsn: str, emb: HashingEmbedder, most: int) -> None:
    """The big namespaces' own graphs, as the operator's ``tulip-memory graphs`` leaves
    them (``--graphs 0`` drops them: the table's graph alone)."""
    store = PgMemory(app_dsn, table=TABLE, embedder=emb)
    started = time.perf_counter()
    try:
        done = await Graphs(store, admin_dsn, most=most).refresh()
    finally:
        await store.close()
    print(
        f"  namespace graphs: {len(done.built)} built, {len(done.dropped)} dropped,"
        f" {len(done.kept)} kept in {time.perf_counter() - started:.1f}s",
        flush=True,
    )


async def run(args: argparse.Namespace) -> None:
    emb = HashingEmbedder(args.dim)
    with contextlib.ExitStack() as stack:
        services = open_services(stack, args.admin_dsn, "unused://", prefix="tulip-bench-recall-")
        setup = PgMemory(services.app_dsn, table=TABLE, embedder=emb, migrator=services.admin_dsn)
        await setup.clear_namespace(("setup", "x"))  # runs the migrations
        await setup.close()
        lg = stack.enter_context(peer_store(services.admin_dsn, emb)) if not args.no_peer else None
        started = time.perf_counter()
        print(f"loading {args.rows:,} memories and {args.turns:,}+ turns ...", flush=True)
        memories, turns = await load(services.admin_dsn, args, emb, lg is not None)
        print(f"  loaded in {time.perf_counter() - started:.1f}s", flush=True)
        await own_graphs(services.app_dsn, services.admin_dsn, emb, args.graphs)
        rng, other = random.Random(2), random.Random(3)
        mem_rows = await measure_memories(
            services.app_dsn,
            lg,
            pick_queries(memories, args.queries, rng),
            emb,
            pick_queries(memories, args.warm, other),
        )
        turn_rows = await measure_turns(
            services.app_dsn,
            pick_queries(turns, args.queries, rng),
            emb,
            pick_queries(turns, args.warm, other),
        )
        if args.nearest:
            for table, corpus in ((TABLE, memories), (f"{TABLE}_turns", turns)):
                await measure_nearest(services.app_dsn, table, corpus, emb, per=8)
    largest = max(memories.sizes.values())
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{sum(memories.sizes.values()):,} memories over {len(memories.sizes):,} namespaces"
        f" (Zipf, largest "
        f"{largest:,}), {args.dim}-d hashing vectors, limit {LIMIT}; index path from "
        f"{plan.INDEX_MIN_ROWS:,} rows; {args.queries} timed queries a class after"
        f" {args.warm} others untimed; {os.cpu_count()} cores, load average {loadavg} at the end"
    )
    report("PgMemory.search vs LangGraph PostgresStore.search (ms)", mem_rows, lg is not None)
    report(
        f"search_turns ({max(turns.sizes.values()):,}-turn namespace"
        f" + {SMALL_TURN_NAMESPACES} small)",
        turn_rows,
        False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--full", action="store_true", help="the users' size: 1M rows, 10k namespaces, 200k turns"
    )
    parser.add_argument("--rows", type=int, help="memories (100,000; full 1,000,000)")
    parser.add_argument("--namespaces", type=int, help="namespaces (1,000; full 10,000)")
    parser.add_argument("--largest", type=int, help="the largest namespace (50,000; full 100,000)")
    parser.add_argument("--turns", type=int, help="the big turns namespace (50,000; full 200,000)")
    parser.add_argument("--reuse", action="store_true", help="measure the rows --admin-dsn holds")
    parser.add_argument("--queries", type=int, default=40, help="per size class")
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        metavar="N",
        help="untimed queries per size class, other than the timed ones, run after the exact"
        " pass and before the timed ones (both stores): a server in use, its buffers"
        " holding what its namespaces' searches read (default 0)",
    )
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's store")
    parser.add_argument(
        "--nearest",
        action="store_true",
        help="also time the index path's nearest rows from the HNSW graph and from the"
        " scope's scan, per namespace (plan.choose's constants)",
    )
    parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
    parser.add_argument(
        "--graphs",
        type=int,
        default=graphs.MOST,
        metavar="N",
        help=f"namespaces per table with a graph of their own (default {graphs.MOST}; 0: none)",
    )
    parser.add_argument(
        "--turn-texts",
        metavar="GLOB",
        help="LoCoMo conversations: the turns are their utterances (real words, common ones"
        " included), not sentences of uniform bench words",
    )
    args = parser.parse_args()
    sizes = {"rows": (100_000, 1_000_000), "namespaces": (1_000, 10_000),
             "largest": (50_000, 100_000), "turns": (50_000, 200_000)}  # fmt: skip
    for name, (small, full) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, full if args.full else small)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
