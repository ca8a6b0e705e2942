"""Reindex pacing: the pause after a batch follows how slow its write was against the
fastest seen (``tulip_memory.reindex.pacing``), and a job's batches take it. The pacer
is fed durations, never a clock; the job test slows one write with a row lock held
until the write has waited far longer than the fastest one took."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.reindex.test_reindex_store import NEW, Table, fill, keeping, wait_for_waiter
from tests.support.services import Postgres
from tulip_memory.reindex import Reindexer
from tulip_memory.reindex.pacing import Pacer


def test_steady_writes_are_not_paced() -> None:
    pacer = Pacer()
    assert [pacer.observe(1, 500, s) for s in (0.05, 0.06, 0.05, 0.07)] == [0.0] * 4
    # Per row: a batch twice the size taking twice as long is not slower.
    assert pacer.observe(1, 1000, 0.12) == 0.0


def test_slow_writes_pause_more_and_more_then_less_to_none() -> None:
    pacer = Pacer(slowdown=1.5, max_factor=8.0, max_pause=5.0)
    assert pacer.observe(1, 100, 0.01) == 0.0  # the fastest: 0.1 ms a row
    assert pacer.observe(1, 100, 0.1) == pytest.approx(0.1)  # 10x slower: pause 1x
    assert pacer.observe(1, 100, 0.1) == pytest.approx(0.2)
    assert pacer.observe(1, 100, 0.1) == pytest.approx(0.4)
    assert pacer.observe(1, 100, 0.1) == pytest.approx(0.8)
    assert pacer.observe(1, 100, 0.1) == pytest.approx(0.8)  # max_factor
    assert pacer.observe(1, 100, 1.0) == pytest.approx(5.0)  # max_pause
    back = [pacer.observe(1, 100, 0.012) for _ in range(8)]  # within 1.5x again
    assert back[0] == pytest.approx(4 * 0.012)
    assert back[1] == pytest.approx(2 * 0.012)
    assert back[-1] == 0.0 and pacer.factor == 0.0


def test_a_new_job_starts_unpaced_and_unmeasured() -> None:
    pacer = Pacer()
    pacer.observe(1, 100, 0.01)
    assert pacer.observe(1, 100, 0.1) > 0
    # Job 2's first write is its fastest so far, however it compares with job 1's.
    assert pacer.observe(2, 100, 0.5) == 0.0 and pacer.factor == 0.0


def test_nothing_written_asks_for_nothing() -> None:
    pacer = Pacer()
    assert pacer.observe(1, 0, 0.3) == pacer.observe(1, 10, 0.0) == 0.0


def test_pacer_settings_are_checked() -> None:
    for bad in ({"slowdown": 1.0}, {"max_factor": 0.5}, {"max_pause": -1.0}):
        with pytest.raises(ValueError, match="slowdown > 1"):
            Pacer(**bad)


@pytest.fixture
async def table(postgres: Postgres) -> AsyncIterator[Table]:
    yield Table(f"rp_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)


async def test_a_batch_whose_write_waited_pauses_the_next(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme"], 8)
    reindexer, sent = keeping(table, store)
    job = await reindexer.start(NEW, tenant="acme", batch=4)
    assert len(sent) == 4 and reindexer.pacer is not None  # 8 rows + 5 turns, by 4
    assert (await reindexer.run_batch(*sent[0])).endswith("vectors")
    assert reindexer.pacer.factor == 0.0  # one write: the fastest, nothing to compare
    # The second range's rows are locked while its write waits, much longer than the
    # first write took: the database is "busy", and the pacer must say so.
    blocker = await asyncpg.connect(table.admin_dsn)
    tx = blocker.transaction()
    await tx.start()
    await blocker.execute(f"SELECT 1 FROM {table.name} WHERE tenant = 'acme' FOR UPDATE")
    batch = asyncio.ensure_future(reindexer.run_batch(*sent[1]))
    await wait_for_waiter(table, "UPDATE")
    # Held past 50 times the whole first write of 4 rows (pacing reacts at 1.5 times).
    await asyncio.sleep(max(0.2, 50 * 4 * reindexer.pacer.fastest))
    await tx.rollback()
    await blocker.close()
    assert (await batch).endswith("vectors")
    assert reindexer.pacer.factor >= 1.0
    for rest in sent[2:]:
        await reindexer.run_batch(*rest)
    assert (await reindexer.job(job.id)).status == "switched"  # type: ignore[union-attr]
    await store.close()


async def test_unpaced_reindexer_has_no_pacer_and_in_flight_is_checked(table: Table) -> None:
    store = table.store()
    assert Reindexer(store, pace=False).pacer is None
    with pytest.raises(ValueError, match="in_flight"):
        Reindexer(store, in_flight=0)
    await store.close()
