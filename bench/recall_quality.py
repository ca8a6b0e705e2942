"""LoCoMo evidence-turn recall of ``PgMemory.search_turns``: lexical, vector, hybrid.

Indexes every turn of each LoCoMo conversation as turns in PgMemory's turn table
(one namespace per conversation, one session-end event per session, through
``prepare_event`` / ``transaction`` / ``write_turns`` as the extraction worker does),
asks each question of the conversation, and counts a question at k when one of its
evidence turns is among the top k turns returned. All methods run on the same
tables in the same run:

- lexical: bm25 over the turns' tsvectors (the hybrid ranking with
  ``vector_weight=0``: the query is never embedded);
- vector: exact cosine (``lexical_weight=0``), with the offline hashing encoder and,
  when sentence-transformers is importable, all-MiniLM-L6-v2;
- hybrid: both lists fused in one statement, with the store's default ranking for
  the encoder (``--lexical-weight``, ``--vector-weight``, ``--k1``, ``--b`` override it).

Latency is the wall time of one ``search_turns`` call (query embedding included, the
encoding cache off). ``--tune`` names the conversations the defaults were tuned on;
the table reports them, the held-out rest, and all of them.

Usage::

    python -m bench.recall_quality --dataset '../shared/data/locomo10/*.json'
    python -m bench.recall_quality --mode pipeline --dataset '../shared/data/locomo10/*.json'

``--mode pipeline`` (bench/quality_pipeline.py) imports the conversations through real
workers and reports turn and memory recall, the import rate and live latency.

Without ``--admin-dsn`` it runs on an embedded Postgres 16 + pgvector in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from bench.locomo import KS, Conversation, dataset_paths, load, turn_text
from tulip_memory.embeddings import BaseEmbedding, HashingEmbedder
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import HybridRanking
from tulip_memory.store.postgres.store import TurnsIn
from tulip_memory.store.postgres.writer import TurnRow
from tulip_ops.dev.embedded import EmbeddedPostgres
from tulip_ops.provision import provision


async def index(store: PgMemory, convs: list[Conversation], form: str) -> None:
    for conv in convs:
        for session in sorted({t.session for t in conv.turns}):
            rows = [
                TurnRow(
                    t.position,
                    turn_text(t, form),
                    {"dia_id": t.dia_id, "speaker": t.speaker},
                    {"dia_id": t.dia_id},
                )
                for t in conv.turns
                if t.session == session
            ]
            turns = TurnsIn(conv.namespace, f"session_{session}", f"{conv.sample}-{session}", rows)
            _, prepared = await store.prepare_event([], turns)
            assert prepared is not None
            async with store.transaction(conv.namespace[0]) as tx:
                await tx.write_turns(prepared)


@dataclass
class Result:
    method: str
    ranks: dict[str, list[int | None]] = field(default_factory=dict)  # sample -> per question
    latency_ms: list[float] = field(default_factory=list)


async def ask(method: str, store: PgMemory, convs: list[Conversation], top_k: int) -> Result:
    result = Result(method)
    await store.search_turns(convs[0].namespace, "warm up", top_k=top_k)
    for conv in convs:
        ranks: list[int | None] = []
        for q in conv.questions:
            started = time.perf_counter()
            hits = await store.search_turns(conv.namespace, q.text, top_k=top_k)
            result.latency_ms.append((time.perf_counter() - started) * 1000)
            found = [i for i, h in enumerate(hits, 1) if h.turn["dia_id"] in q.evidence]
            ranks.append(found[0] if found else None)
        result.ranks[conv.sample] = ranks
    return result


def hit_at(result: Result, samples: Sequence[str], k: int) -> float:
    ranks = [r for s in samples for r in result.ranks[s]]
    return sum(1 for r in ranks if r is not None and r <= k) / max(1, len(ranks))


def report(results: list[Result], convs: list[Conversation], tune: set[str]) -> None:
    every = [c.sample for c in convs]
    held_out = [s for s in every if s not in tune]
    tuned = [s for s in every if s in tune]
    n = sum(len(c.questions) for c in convs)
    print(
        f"\nLoCoMo: {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
        f"{n} questions with evidence; hit@k = an evidence turn in the top k"
    )
    head = f"{'method':34} {'hit@1':>6} {'hit@5':>6} {'hit@10':>7} {'p50 ms':>7} {'p99 ms':>7}"
    if tuned and held_out:
        head += f" {'@10 tune':>9} {'@10 held-out':>13}"
    print(head)
    for r in results:
        row = f"{r.method:34}" + "".join(
            f" {hit_at(r, every, k):{6 if k < 10 else 7}.3f}" for k in KS
        )
        row += f" {np.percentile(r.latency_ms, 50):7.2f} {np.percentile(r.latency_ms, 99):7.2f}"
        if tuned and held_out:
            row += f" {hit_at(r, tuned, 10):9.3f} {hit_at(r, held_out, 10):13.3f}"
        print(row)
    if tuned and held_out:
        print(f"tune: {', '.join(tuned)}; held-out: {', '.join(held_out)}")
    categories = sorted({q.category for c in convs for q in c.questions})
    print("\nhit@10 by the data set's question category")
    print(f"{'method':34}" + "".join(f" {c:>6}" for c in categories))
    for r in results:
        row = f"{r.method:34}"
        for cat in categories:
            ranks = [
                rank
                for c in convs
                for q, rank in zip(c.questions, r.ranks[c.sample], strict=True)
                if q.category == cat
            ]
            row += f" {sum(1 for x in ranks if x is not None and x <= 10) / len(ranks):6.3f}"
        print(row)


def encoders(minilm: str) -> list[tuple[str, BaseEmbedding]]:
    out: list[tuple[str, BaseEmbedding]] = [("hashing-384", HashingEmbedder(384))]
    if minilm == "off":
        return out
    try:
        from tulip_memory.embeddings.local import SentenceTransformerEmbedder

        out.append(("MiniLM-L6-v2", SentenceTransformerEmbedder()))
    except ImportError as e:
        if minilm == "on":
            raise
        print(f"(all-MiniLM-L6-v2 skipped: {e})", file=sys.stderr)
    return out


async def run(args: argparse.Namespace, app_dsn: str, admin_dsn: str) -> None:
    convs = load(dataset_paths(args.dataset))
    if args.only:
        convs = [c for c in convs if c.sample in set(args.only.split(","))]
    overrides: dict[str, Any] = {
        name: value
        for name, value in (
            ("lexical_weight", args.lexical_weight),
            ("vector_weight", args.vector_weight),
            ("k1", args.k1),
            ("b", args.b),
        )
        if value is not None
    }
    print(f"text: {args.text}; text search config: {args.text_search_config}", flush=True)
    results: list[Result] = []
    for label, encoder in encoders(args.minilm):
        table = "bench_locomo_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
        await _drop(admin_dsn, table)

        def store(
            ranking: HybridRanking | None, enc: BaseEmbedding = encoder, t: str = table
        ) -> PgMemory:
            return PgMemory(
                app_dsn,
                migrator=admin_dsn,
                table=t,
                embedder=enc,
                encoding_cache=0,
                text_search_config=args.text_search_config,
                ranking=ranking,
            )

        started = time.perf_counter()
        writer = store(None)
        hybrid = replace(writer.ranking, **overrides)  # the store's default for this encoder
        await index(writer, convs, args.text)
        await writer.close()
        print(f"{label}: indexed in {time.perf_counter() - started:.1f}s; {hybrid}", flush=True)
        methods = [
            (f"vector ({label})", replace(hybrid, lexical_weight=0.0)),
            (f"hybrid (bm25 + {label})", hybrid),
        ]
        if not results:
            methods.insert(0, ("lexical (bm25)", replace(hybrid, vector_weight=0.0)))
        for name, ranking in methods:
            s = store(ranking)
            try:
                results.append(await ask(name, s, convs, args.top_k))
            finally:
                await s.close()
            print(f"  {name}: hit@10 {hit_at(results[-1], [c.sample for c in convs], 10):.3f}")
        await _drop(admin_dsn, table)
    report(results, convs, set(args.tune.split(",")) if args.tune else set())


async def _drop(admin_dsn: str, table: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        for t in (f"{table}_turns", f"{table}_migrations", table):
            await conn.execute(f"DROP TABLE IF EXISTS public.{t}")
    finally:
        await conn.close()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", required=True, help="glob of LoCoMo conversation files")
    p.add_argument("--admin-dsn", help="an administrator DSN (default: embedded Postgres)")
    p.add_argument("--only", help="comma-separated sample ids to run (default: all)")
    p.add_argument("--tune", default="26,30,41", help="sample ids the defaults were tuned on")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--minilm", choices=("auto", "on", "off"), default="auto")
    p.add_argument(
        "--text",
        choices=("text", "speaker", "caption", "speaker+caption"),
        default="speaker+caption",
        help="what is indexed for a turn",
    )
    p.add_argument("--text-search-config", default="english")
    p.add_argument("--lexical-weight", type=float)
    p.add_argument("--vector-weight", type=float)
    p.add_argument("--k1", type=float)
    p.add_argument("--b", type=float)
    p.add_argument(
        "--mode",
        choices=("direct", "pipeline"),
        default="direct",
        help="direct: index the turns straight into the store (the methods above);\n"
        "pipeline: import the conversations through real workers (bench/quality_pipeline.py),\n"
        "against the direct hybrid (hashing encoder) measured in the same run",
    )
    p.add_argument("--broker-url", help="pipeline: a Redis of its own (default: embedded)")
    p.add_argument("--shards", type=int, default=2, help="pipeline: extraction shard workers")
    p.add_argument("--max-backlog", type=int, default=2, help="pipeline: the import's backlog")
    p.add_argument("--seed", type=int, default=7, help="pipeline: the sample of memories")
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> None:
    if args.admin_dsn:
        await run(args, await provision(args.admin_dsn, "tulip_bench"), args.admin_dsn)
        return
    tmp = Path(tempfile.mkdtemp(prefix="tulip-bench-quality-"))
    server = EmbeddedPostgres(tmp / "postgres", keep=False).start("tulip_bench")
    try:
        await run(args, server.app_dsn, server.admin_dsn)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.mode == "pipeline":
        return pipeline_main(args)
    asyncio.run(main_async(args))
    return 0


def pipeline_main(args: argparse.Namespace) -> int:
    from bench._services import bench_main
    from bench.quality_pipeline import PipelineResult, run_pipeline

    convs = load(dataset_paths(args.dataset))
    if args.only:
        convs = [c for c in convs if c.sample in set(args.only.split(","))]

    def measure(stack: Any) -> tuple[PipelineResult, Result, list[Conversation]]:
        result, services = run_pipeline(
            stack,
            convs,
            admin_dsn=args.admin_dsn,
            broker_url=args.broker_url,
            shards=args.shards,
            max_backlog=args.max_backlog,
            seed=args.seed,
        )
        direct = asyncio.run(_direct_hybrid(args, convs, services.app_dsn, services.admin_dsn))
        return result, direct, convs

    return bench_main(measure, lambda r: pipeline_report(*r))


async def _direct_hybrid(
    args: argparse.Namespace, convs: list[Conversation], app_dsn: str, admin_dsn: str
) -> Result:
    """The baseline of the same run: every message a turn of its own, hybrid ranking with
    the hashing encoder, indexed straight into the store."""
    table = "bench_locomo_direct"
    await _drop(admin_dsn, table)
    store = PgMemory(
        app_dsn, table=table, embedder=HashingEmbedder(384), encoding_cache=0, migrator=admin_dsn
    )
    try:
        await index(store, convs, args.text)
        return await ask("direct hybrid (hashing-384)", store, convs, args.top_k)
    finally:
        await store.close()
        await _drop(admin_dsn, table)


def pipeline_report(result: Any, direct: Result, convs: list[Conversation]) -> None:
    from bench.quality_pipeline import hit_rate, latency_line

    every = [c.sample for c in convs]
    direct_ranks = [r for s in every for r in direct.ranks[s]]
    print(
        f"\nLoCoMo through the pipeline: {len(convs)} conversations, {result.events} events"
        f" (a session per speaker), {result.messages} messages (one per speaker namespace)"
    )
    print(
        f"messages indexed as turns: {result.indexed / max(1, result.messages):.4f}"
        f" ({result.indexed}/{result.messages}; {result.duplicated} indexed twice;"
        f" {result.turns} turns)"
    )
    print(f"\n{'turn recall':34} {'hit@1':>6} {'hit@5':>6} {'hit@10':>7}")
    for label, ranks in (
        ("pipeline (turns of the workers)", result.turn_ranks),
        (direct.method, direct_ranks),
    ):
        print(f"{label:34}" + "".join(f" {hit_rate(ranks, k):{6 if k < 10 else 7}.3f}" for k in KS))
    ratio = hit_rate(result.turn_ranks, 10) / max(1e-9, hit_rate(direct_ranks, 10))
    print(f"{'pipeline / direct at 10':34} {ratio:21.3f}")
    categories = sorted(set(result.categories))
    print("\nturn hit@10 by the data set's question category (2: temporal)")
    print(f"{'':34}" + "".join(f" {c:>6}" for c in categories))
    for label, ranks in (("pipeline", result.turn_ranks), ("direct hybrid", direct_ranks)):
        row = f"{label:34}"
        for cat in categories:
            mine = [r for r, c in zip(ranks, result.categories, strict=True) if c == cat]
            row += f" {hit_rate(mine, 10):6.3f}"
        print(row)
    answered = result.answer_hits
    share = sum(answered) / max(1, len(answered))
    print(
        f"\nmemories: {result.memories} stored; answer@10 {share:.3f}"
        f" ({len(answered)} questions with an answer); evidence@10"
        f" {sum(result.evidence_hits) / max(1, len(result.evidence_hits)):.3f}"
        f" ({len(result.evidence_hits)} questions)"
    )
    rate = result.events / max(1e-9, result.import_seconds)
    print(
        f"\nimport: {result.events} events, {result.messages // 2} messages in"
        f" {result.import_seconds:.1f}s: {rate:.2f} events/s, "
        f"{result.messages / 2 / max(1e-9, result.import_seconds):.1f} messages/s"
        " (published to applied)"
    )
    print(f"\n{'live event latency (ms)':28} {'n':>5} {'p50':>8} {'p95':>8} {'max':>8}")
    print(latency_line("during the import", result.live_busy))
    print(latency_line("idle pipeline", result.live_idle))
    print(f"\n{len(result.sample_memories)} random memories (namespace: content [key])")
    for who, memory in result.sample_memories:
        print(f"- {who}: {memory.content} [{memory.key}]")


if __name__ == "__main__":
    sys.exit(main())
