"""PgMemory recall latency and quality on a multi-tenant table.

Fills a table with ``--rows`` rows over ``--tenants`` tenants (each user has four
memory-type namespaces of ``--per-namespace`` rows, 384-dimension vectors from the
hashing embedder), then measures, on one pool and in the same run:

- ``search`` of one namespace and ``search_many`` over the four memory types;
- the seed's naive cost: one ``search`` per type, four round trips;
- the floor: a bare ``SELECT 1`` on the same pool;
- recall@10 of each against an exact numpy ranking, beside a plain HNSW
  ``ORDER BY embedding <=> q`` (what the store deliberately does not run).

Usage: python -m bench.recall [--rows 200000] [--admin-dsn DSN]
Without ``--admin-dsn`` it runs on an embedded Postgres 16 + pgvector in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector import Vector

from tulip_memory.embeddings.hashing import HashingEmbedder
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import NS_SEP
from tulip_ops.dev.embedded import EmbeddedPostgres
from tulip_ops.provision import provision

TYPES = ("user", "feedback", "project", "reference")
VOCAB = [f"w{i}" for i in range(3000)]


@dataclass
class Layout:
    rows: int
    tenants: int
    per_namespace: int

    @property
    def users_per_tenant(self) -> int:
        return max(1, self.rows // (self.tenants * len(TYPES) * self.per_namespace))


def text(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCAB, k=rng.randint(6, 12)))


async def load(admin_dsn: str, table: str, layout: Layout, emb: HashingEmbedder) -> None:
    """Bulk-load with COPY, the HNSW index dropped and rebuilt after (as an operator
    would load a table this size)."""
    rng = random.Random(1)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP INDEX IF EXISTS public.{table}_hnsw")
        await conn.set_type_codec(
            "vector",
            encoder=lambda v: Vector(v).to_binary(),
            decoder=Vector.from_binary,
            format="binary",
            schema="public",
        )
        batch: list[tuple[Any, ...]] = []
        for t in range(layout.tenants):
            for u in range(layout.users_per_tenant):
                for typ in TYPES:
                    ns = NS_SEP.join((f"tenant{t}", "users", f"u{u}", typ))
                    for i in range(layout.per_namespace):
                        content = text(rng)
                        batch.append((f"tenant{t}", ns, f"k{i}", json.dumps(content), content))
                if len(batch) >= 20_000:
                    await _copy(conn, table, batch, emb)
                    batch = []
        if batch:
            await _copy(conn, table, batch, emb)
        started = time.perf_counter()
        await conn.execute("SET maintenance_work_mem = '1GB'")
        await conn.execute(
            f"CREATE INDEX {table}_hnsw ON public.{table} USING hnsw (embedding vector_cosine_ops)"
        )
        print(f"  hnsw index built in {time.perf_counter() - started:.1f}s", flush=True)
        await conn.execute(f"ANALYZE public.{table}")
    finally:
        await conn.close()


async def _copy(conn: Any, table: str, batch: list[tuple[Any, ...]], emb: HashingEmbedder) -> None:
    vectors = emb.embed([r[4] for r in batch])
    records = [(*r, vectors[i]) for i, r in enumerate(batch)]
    await conn.copy_records_to_table(
        table,
        schema_name="public",
        records=records,
        columns=["tenant", "ns", "key", "value", "content", "embedding"],
    )


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> tuple[list[float], list[Any]]:
    lat, out = [], []
    for _ in range(n):
        started = time.perf_counter()
        out.append(await fn())
        lat.append((time.perf_counter() - started) * 1000)
    return lat, out


async def measure(app_dsn: str, admin_dsn: str, table: str, layout: Layout, queries: int) -> None:
    emb = HashingEmbedder(384)
    store = PgMemory(app_dsn, table=table, embedder=emb, encoding_cache=0)
    rng = random.Random(2)
    picks: list[list[tuple[str, ...]]] = []
    for _ in range(queries):
        t, u = rng.randrange(layout.tenants), rng.randrange(layout.users_per_tenant)
        picks.append([(f"tenant{t}", "users", f"u{u}", typ) for typ in TYPES])
    qtexts = [" ".join(rng.choices(VOCAB, k=4)) for _ in range(queries)]
    pool = await store._get_pool()
    await store.search(picks[0][0], qtexts[0])  # warm the pool and plans
    admin = await asyncpg.connect(admin_dsn)
    results: dict[str, dict[str, float]] = {}

    async def run(name: str, make: Callable[[int], Callable[[], Awaitable[Any]]]) -> list[Any]:
        lat: list[float] = []
        outs: list[Any] = []
        for i in range(queries):
            one_lat, one_out = await timed(make(i), 1)
            lat += one_lat
            outs += one_out
        results[name] = {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99))}
        return outs

    await run("SELECT 1 (floor)", lambda i: lambda: pool.fetchval("SELECT 1"))
    single = await run(
        "search, one namespace", lambda i: lambda: store.search(picks[i][0], qtexts[i])
    )
    many = await run(
        "search_many, 4 types", lambda i: lambda: store.search_many(picks[i], qtexts[i])
    )

    async def naive(i: int) -> list[Any]:
        return [await store.search(ns, qtexts[i]) for ns in picks[i]]

    await run("4 x search (seed's naive)", lambda i: lambda: naive(i))

    async def hnsw(i: int) -> list[str]:
        q = emb.embed([qtexts[i]])[0]
        async with admin.transaction():
            rows = await admin.fetch(
                f"SELECT key FROM public.{table} WHERE tenant = $1 AND ns = $2 "
                "ORDER BY embedding <=> $3::vector LIMIT 10",
                picks[i][0][0],
                NS_SEP.join(picks[i][0]),
                "[" + ",".join(map(str, q)) + "]",
            )
        return [r["key"] for r in rows]

    hnsw_admin_settings = "SET enable_sort = off"  # let it pick the index, as stale stats would
    await admin.execute(hnsw_admin_settings)
    plain = await run("plain HNSW order (avoided)", lambda i: lambda: hnsw(i))

    exact = await exact_top10(admin, table, picks, qtexts, emb)
    recall = {
        "search, one namespace": _recall([[it.key for it in r] for r in single], exact),
        "search_many, 4 types": _recall([[it.key for it in r[0]] for r in many], exact),
        "plain HNSW order (avoided)": _recall(plain, exact),
    }
    await admin.close()
    await store.close()
    floor = results["SELECT 1 (floor)"]["p50"]
    print(f"\n{layout.rows:,} rows, {layout.tenants} tenants, {queries} queries, 384-d vectors")
    print(f"{'':30} {'p50 ms':>8} {'p99 ms':>8} {'p50/floor':>10} {'recall@10':>10}")
    for name, r in results.items():
        rc = recall.get(name)
        print(
            f"{name:30} {r['p50']:8.2f} {r['p99']:8.2f} {r['p50'] / floor:10.1f}"
            f" {'' if rc is None else f'{rc:10.3f}'}"
        )
    ratio = results["4 x search (seed's naive)"]["p50"] / results["search_many, 4 types"]["p50"]
    print(f"\nsearch_many is {ratio:.2f}x faster than one search per type (p50)")


Exact = tuple[dict[str, float], float]


async def exact_top10(
    admin: Any,
    table: str,
    picks: list[list[tuple[str, ...]]],
    qtexts: list[str],
    emb: HashingEmbedder,
) -> list[Exact]:
    """Per query: every row's exact cosine similarity, and the 10th best."""
    out: list[Exact] = []
    for ns, q in zip(picks, qtexts, strict=True):
        rows = await admin.fetch(
            f"SELECT key, content FROM public.{table} WHERE tenant = $1 AND ns = $2",
            ns[0][0],
            NS_SEP.join(ns[0]),
        )
        m = emb.embed([r["content"] for r in rows])
        qv = emb.embed([q])[0]
        sims = (m @ qv) / np.maximum(np.linalg.norm(m, axis=1) * np.linalg.norm(qv), 1e-12)
        ranked = np.sort(sims)[::-1]
        kth = float(ranked[min(9, len(ranked) - 1)])
        out.append(({r["key"]: float(sims[i]) for i, r in enumerate(rows)}, kth))
    return out


def _recall(got: list[list[str]], exact: list[Exact]) -> float:
    """Tie-aware recall@10: a returned row counts when it is as similar as the exact
    10th best (float32 rounding may order equal scores differently)."""
    hits = total = 0
    for keys, (sims, kth) in zip(got, exact, strict=True):
        want = min(10, len(sims))
        total += want
        hits += sum(1 for k in keys[:want] if sims.get(k, -2.0) >= kth - 1e-5)
    return hits / max(1, total)


async def main_async(args: argparse.Namespace) -> None:
    layout = Layout(args.rows, args.tenants, args.per_namespace)
    table = "bench_recall"
    tmp = None
    server = None
    if args.admin_dsn:
        admin_dsn = args.admin_dsn
        app_dsn = await provision(admin_dsn, "tulip_bench")
    else:
        tmp = Path(tempfile.mkdtemp(prefix="tulip-bench-"))
        server = EmbeddedPostgres(tmp, keep=False).start("tulip_bench")
        admin_dsn, app_dsn = server.admin_dsn, server.app_dsn
    try:
        setup = PgMemory(app_dsn, table=table, embedder=HashingEmbedder(384), migrator=admin_dsn)
        await setup.clear_namespace(("setup",))  # runs the migrations
        await setup.close()
        conn = await asyncpg.connect(admin_dsn)
        existing = await conn.fetchval(f"SELECT count(*) FROM public.{table}")
        await conn.close()
        if existing != layout.users_per_tenant * layout.tenants * 4 * layout.per_namespace:
            print(f"loading {layout.rows:,} rows ...", flush=True)
            conn = await asyncpg.connect(admin_dsn)
            await conn.execute(f"TRUNCATE public.{table}")
            await conn.close()
            started = time.perf_counter()
            await load(admin_dsn, table, layout, HashingEmbedder(384))
            print(f"  loaded in {time.perf_counter() - started:.1f}s", flush=True)
        await measure(app_dsn, admin_dsn, table, layout, args.queries)
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--per-namespace", type=int, default=50)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
