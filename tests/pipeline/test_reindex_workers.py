"""Online reindex with real ``celery worker`` processes on ``memory.reindex``, driven
by the ``tulip-memory reindex`` command line, while recall keeps answering."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import psutil
import pytest
from celery import Celery
from pgvector.asyncpg import register_vector

from tests.pipeline.conftest import Pipeline
from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import app_store
from tests.support.workers import ROOT, WorkerProcess
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import HybridRanking
from tulip_wire.endpoints import kombu_url
from tulip_wire.topology import REINDEX_QUEUE, REINDEX_TASK
from tulip_workers.priority import BATCH_NICE

TENANTS = ("acme", "globex", "initech")
ROWS = 240
QUERIES = ("coffee in the morning", "trip to lisbon", "allergic to nuts", "plays the cello")
VECTORS_ONLY = HybridRanking(lexical_weight=0.0, vector_weight=1.0)
WORDS: tuple[str, ...] = ("coffee", "morning", "trip", "lisbon", "allergic", "nuts", "plays")
WORDS += ("cello", "garden", "book", "dog", "rain")


OPENAI = "openai/text-embedding-3-small"


def fact(i: int) -> str:
    return f"user {i} likes {WORDS[i % 12]} and {WORDS[(i * 7) % 12]} on day {i % 5}"


@dataclass
class Reindex:
    pipeline: Pipeline
    extra: dict[str, str]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
        env.update(self.pipeline.env(TULIP_DATABASE_ADMIN_URL=self.pipeline.admin_url))
        env.update(self.extra)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        env["PYTHONPATH"] = str(ROOT)
        return env

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tulip_ops.cli", "reindex", *args],
            cwd=ROOT,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def worker(self, name: str) -> WorkerProcess:
        return self.pipeline.workers.start(name, ["memory.reindex"], **self.env())

    async def admin(self, query: str, *args: object) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.pipeline.admin_url)
        await register_vector(conn)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    async def job(self) -> asyncpg.Record:
        rows = await self.admin(f"SELECT * FROM {self.pipeline.table}_reindex_jobs ORDER BY id")
        return rows[-1]

    async def ranges_done(self) -> int:
        rows = await self.admin(
            f"SELECT count(*) AS n FROM {self.pipeline.table}_reindex_ranges WHERE status = 'done'"
        )
        return int(rows[0]["n"])


def allowed(fake_openai: FakeOpenAI) -> dict[str, str]:
    """What workers and the command need to build the new model's embedder from the
    table's registry: its key, and the model at that address allowed."""
    return {"OPENAI_API_KEY": "sk-test", "TULIP_EMBED_ALLOWED": f"{OPENAI}={fake_openai.url}"}


def store(pipeline: Pipeline) -> PgMemory:
    return app_store(
        pipeline.database_url,
        table=pipeline.table,
        embedder=HashingEmbedder(384),
        ranking=VECTORS_ONLY,
    )


@pytest.fixture
async def seeded(pipeline: Pipeline) -> AsyncIterator[PgMemory]:
    s = store(pipeline)
    for t in TENANTS:
        await s.put_batch([((t, "facts"), f"f{i:04d}", fact(i), None) for i in range(ROWS)])
    yield s
    await s.close()


async def answer(s: PgMemory, tenant: str, query: str) -> list[tuple[str, float]]:
    hits = await s.search_across([(tenant, "facts")], query, limit=5)
    return [(h.item.key, round(h.distance or 0.0, 5)) for h in hits]


async def all_answers(s: PgMemory) -> dict[tuple[str, str], list[tuple[str, float]]]:
    return {(t, q): await answer(s, t, q) for t in TENANTS for q in QUERIES}


async def no_row_lacks(rx: Reindex, slot: str) -> None:
    """Every row has the new vector, and it is the new model's vector of its text."""
    table = rx.pipeline.table
    rows = await rx.admin(f"SELECT content, {slot} AS v FROM {table}")
    assert len(rows) == len(TENANTS) * ROWS
    missing = [r["content"] for r in rows if r["v"] is None]
    assert not missing, f"{len(missing)} rows without the new vector"


async def test_recall_answers_throughout_and_switches_once(
    pipeline: Pipeline, seeded: PgMemory
) -> None:
    rx = Reindex(pipeline, {})
    before = await all_answers(seeded)
    started = rx.cli("--model", "hashing:64", "--batch", "20", "--detach")
    assert started.returncode == 0, started.stderr
    assert "in batches of 20" in started.stdout

    reader = store(pipeline)
    seen: list[tuple[tuple[str, str], list[tuple[str, float]]]] = []

    workers: list[WorkerProcess] = []

    def start_workers() -> None:
        workers.extend((rx.worker("reindex-a"), rx.worker("reindex-b")))

    # Recall runs before the workers exist, while they start, and all through the job.
    starting = asyncio.ensure_future(asyncio.to_thread(start_workers))
    while not starting.done() or (await rx.job())["status"] == "running":
        for key in before:
            seen.append((key, await answer(reader, *key)))
    await starting
    # Batch work: each worker lowered itself below this process (tulip_workers.priority).
    expected = max(os.nice(0), BATCH_NICE)
    assert [psutil.Process(w.proc.pid).nice() for w in workers if w.proc] == [expected] * 2
    for key in before:  # and a round after the switch
        seen.append((key, await answer(reader, *key)))
    job = await rx.job()
    assert job["status"] == "switched", dict(job)
    after = await all_answers(seeded)
    assert after != before
    # Every answer is exactly what one model gives; once this reader saw the new model
    # it never saw the old one again: the switch is atomic.
    models = []
    for key, got in seen:
        assert got in (before[key], after[key]), (key, got)
        models.append("old" if got == before[key] and got != after[key] else "new")
    first_new = models.index("new")
    assert "old" not in models[first_new:]
    assert models.count("old") > 0
    await no_row_lacks(rx, job["slot"])
    ranges = await rx.admin(f"SELECT status, runs FROM {pipeline.table}_reindex_ranges")
    assert len(ranges) == len(TENANTS) * ROWS // 20
    assert {(r["status"], r["runs"]) for r in ranges} == {("done", 1)}
    status = rx.cli("--status")
    assert status.returncode == 0 and "switched" in status.stdout, status
    finalized = rx.cli("--finalize")
    assert finalized.returncode == 0, finalized.stderr
    assert await answer(reader, "acme", QUERIES[0]) == after[("acme", QUERIES[0])]
    await reader.close()


async def test_sigkill_mid_job_then_resume_leaves_no_gap_or_duplicate(
    pipeline: Pipeline, seeded: PgMemory, fake_openai: FakeOpenAI
) -> None:
    rx = Reindex(pipeline, allowed(fake_openai))
    slow = 36  # every batch's embedding call takes a while, so the kill lands mid-job
    fake_openai.script_embeddings(Reply(), *[Reply(delay=0.25) for _ in range(slow)])
    victim = rx.worker("reindex-victim")
    started = rx.cli(
        "--model", OPENAI, "--api-base", fake_openai.url,
        "--batch", "20", "--detach",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    for _ in range(1200):  # a minute at most
        if await rx.ranges_done() >= 5:
            break
        await asyncio.sleep(0.05)
    victim.kill()
    done_at_kill = await rx.ranges_done()
    assert 5 <= done_at_kill < len(TENANTS) * ROWS // 20
    assert (await rx.job())["status"] == "running"

    rx.worker("reindex-heir")
    resumed = rx.cli("--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "recall now reads" in resumed.stdout
    assert "rows/s" in resumed.stdout  # the progress lines
    job = await rx.job()
    assert job["status"] == "switched"
    await no_row_lacks(rx, job["slot"])
    rows = await rx.admin(f"SELECT content, {job['slot']} AS v FROM {pipeline.table}")
    want = fake_openai.embedding_vectors([r["content"] for r in rows[:50]])
    got = np.stack([r["v"].to_numpy() for r in rows[:50]])
    assert np.allclose(got, want, atol=1e-5)
    ranges = await rx.admin(f"SELECT runs, rows FROM {pipeline.table}_reindex_ranges")
    # Each range was written once, and together they wrote every row once.
    assert all(r["runs"] == 1 for r in ranges)
    assert sum(r["rows"] for r in ranges) == len(TENANTS) * ROWS == job["planned_rows"]


async def test_a_failing_model_pauses_the_job_and_resume_finishes_it(
    pipeline: Pipeline, seeded: PgMemory, fake_openai: FakeOpenAI
) -> None:
    rx = Reindex(pipeline, allowed(fake_openai))
    unknown = rx.cli("--model", "no-such-provider/model-x", "--tenant", "acme")
    assert unknown.returncode == 1 and "unknown embedding model" in unknown.stderr
    worker = rx.worker("reindex-a")
    broken = Reply(status=400, body={"error": {"message": "model overloaded: try later"}})
    fake_openai.script_embeddings(Reply(), Reply(), Reply(), *[broken] * 20)
    run = rx.cli(
        "--model", OPENAI, "--api-base", fake_openai.url,
        "--tenant", "acme", "--batch", "40",
    )  # fmt: skip
    assert run.returncode == 1
    assert "paused" in run.stderr and "model overloaded" in run.stderr, run.stderr
    assert "--resume" in run.stderr
    status = rx.cli("--status", "--tenant", "acme")
    assert "paused" in status.stdout and "model overloaded" in status.stdout
    # Forged batch tasks naming acme's pending ranges under another tenant: the worker
    # pins that tenant, finds no job, and changes nothing.
    job = await rx.job()
    table = pipeline.table
    pending = await rx.admin(
        f"SELECT id FROM {table}_reindex_ranges WHERE job = $1 AND status = 'pending'",
        job["id"],
    )
    assert pending
    forger = Celery("tulip_reindex_forger")
    forger.conf.broker_url = kombu_url(pipeline.broker_url)
    for r in pending:
        args = [job["id"], r["id"], "globex"]
        forger.send_task(REINDEX_TASK, args=args, queue=REINDEX_QUEUE, exchange="")
    skipped = f"skipped: tenant 'globex' has no reindex job {job['id']}"
    for _ in range(600):  # a minute at most
        if worker.output().count(f"reindex batch {skipped}") >= len(pending):
            break
        await asyncio.sleep(0.1)
    assert worker.output().count(f"reindex batch {skipped}") == len(pending), worker.output()
    still = await rx.admin(
        f"SELECT count(*) AS n FROM {table}_reindex_ranges WHERE job = $1 AND status = 'pending'",
        job["id"],
    )
    assert still[0]["n"] == len(pending) and (await rx.job())["status"] == "paused"
    second = rx.cli("--model", "hashing:32", "--tenant", "acme")
    assert second.returncode == 1 and "may not overlap" in second.stderr
    # Recall still answers from the old vectors while the job is paused.
    assert len(await seeded.search(("acme", "facts"), "cello")) == 10
    fake_openai.reset()
    resumed = rx.cli("--resume", "--tenant", "acme")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    job = await rx.job()
    assert job["status"] == "switched" and job["scope"] == "acme"
    rows = await rx.admin(
        f"SELECT tenant, {job['slot']} AS v FROM {pipeline.table} ORDER BY tenant"
    )
    # Only the tenant asked for moved; the others never got the new vectors.
    assert all((r["v"] is not None) == (r["tenant"] == "acme") for r in rows)
    assert len(await seeded.search(("globex", "facts"), "cello")) == 10


async def test_a_worker_not_allowed_the_new_model_pauses_the_job_without_calling_it(
    pipeline: Pipeline, seeded: PgMemory, fake_openai: FakeOpenAI
) -> None:
    """The registry names the new model's address; a worker not configured for it
    refuses to send the rows there, and the job pauses saying what to set."""
    rx = Reindex(pipeline, {"OPENAI_API_KEY": "sk-test"})
    worker = rx.worker("reindex-unconfigured")
    run = rx.cli("--model", OPENAI, "--api-base", fake_openai.url, "--tenant", "acme")
    assert run.returncode == 1 and "paused" in run.stderr, run.stdout + run.stderr
    assert "TULIP_EMBED_ALLOWED" in run.stderr and "not configured to use" in run.stderr
    # The command's own probe of the model it was asked for, and nothing from the worker.
    assert len(fake_openai.requests_to("/v1/embeddings")) == 1
    worker.stop()
    rx.extra.update(allowed(fake_openai))
    rx.worker("reindex-configured")
    resumed = rx.cli("--resume", "--tenant", "acme")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (await rx.job())["status"] == "switched"


def test_the_pooled_reindex_worker_and_its_pool_run_below_the_request_path(
    pipeline: Pipeline,
) -> None:
    """``tulip-memory worker reindex``'s layout (prefork, 2 processes): the worker lowers
    itself before its pool forks, so the processes that run the model inherit it."""
    rx = Reindex(pipeline, {})
    factory = pipeline.workers
    pool = WorkerProcess(
        "reindex-pool", [REINDEX_QUEUE], rx.env(), factory.tmp / "reindex-pool.log", "prefork", 2
    )
    factory.start_all([pool])
    assert pool.proc is not None
    parent = psutil.Process(pool.proc.pid)
    children = parent.children()
    assert len(children) == 2, pool.output()
    expected = max(os.nice(0), BATCH_NICE)
    assert [p.nice() for p in (parent, *children)] == [expected] * 3


def test_a_malformed_worker_niceness_stops_the_worker_naming_it(pipeline: Pipeline) -> None:
    rx = Reindex(pipeline, {"TULIP_WORKER_NICE": "lowest"})
    factory = pipeline.workers
    worker = WorkerProcess("reindex-bad", [REINDEX_QUEUE], rx.env(), factory.tmp / "bad.log")
    factory.started.append(worker)
    worker.start(wait=False)
    assert worker.proc is not None
    assert worker.proc.wait(timeout=120) != 0
    assert "TULIP_WORKER_NICE must be an integer" in worker.output()
