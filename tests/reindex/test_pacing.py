"""Reindex pacing: the pause after a batch follows how slow the database's probe was
against the job's reference probes (``tulip_memory.reindex.pacing``), and a job's
batches take it. The pacer is fed durations, never a clock; the job test gives the
pacer a reference no real probe can match, so the batch's own probe finds the
database slowed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.reindex.test_reindex_store import NEW, Table, fill, keeping
from tests.support.services import Postgres
from tulip_memory.reindex import Reindexer
from tulip_memory.reindex.pacing import Pacer


def calibrated(pacer: Pacer, job_id: int = 1, probe: float = 0.001) -> Pacer:
    """``pacer`` with job ``job_id``'s reference probes taken, each ``probe`` seconds."""
    while pacer.calibrating(job_id):
        assert pacer.observe(job_id, probe) == 0.0
    return pacer


def test_the_reference_is_the_median_of_the_first_probes() -> None:
    pacer = Pacer(calibration=5)
    for probe in (0.004, 0.001, 0.002, 0.009, 0.002):
        assert pacer.calibrating(1) and pacer.observe(1, probe, 0.3) == 0.0
    assert not pacer.calibrating(1) and pacer.reference == 0.002
    assert pacer.calibrating(2)  # another job: its own reference


def test_probes_as_fast_as_the_reference_are_not_paced() -> None:
    pacer = calibrated(Pacer())
    assert [pacer.observe(1, p, 0.2) for p in (0.001, 0.0012, 0.0009, 0.0014)] == [0.0] * 4
    assert pacer.factor == 0.0


def test_slow_probes_pause_more_and_more_then_less_to_none() -> None:
    pacer = calibrated(Pacer(slowdown=1.5, max_factor=8.0, max_pause=5.0, weight=1.0))
    assert pacer.observe(1, 0.01, 0.1) == pytest.approx(0.1)  # 10x slower: pause 1x
    assert pacer.observe(1, 0.01, 0.1) == pytest.approx(0.2)
    assert pacer.observe(1, 0.01, 0.1) == pytest.approx(0.4)
    assert pacer.observe(1, 0.01, 0.1) == pytest.approx(0.8)
    assert pacer.observe(1, 0.01, 0.1) == pytest.approx(0.8)  # max_factor
    assert pacer.observe(1, 0.01, 1.0) == pytest.approx(5.0)  # max_pause
    back = [pacer.observe(1, 0.0012, 0.1) for _ in range(8)]  # within 1.5x again
    assert back[0] == pytest.approx(4 * 0.1)
    assert back[1] == pytest.approx(2 * 0.1)
    assert back[-1] == 0.0 and pacer.factor == 0.0


def test_one_slow_probe_among_fast_ones_is_not_a_busy_database() -> None:
    pacer = calibrated(Pacer(slowdown=1.5, weight=0.25))
    # Descheduled once: the running average moves to 1.25x the reference, within bound.
    assert pacer.observe(1, 0.002, 0.1) == 0.0
    # Slow probe after slow probe: the average crosses 1.5x.
    assert max(pacer.observe(1, 0.003, 0.1) for _ in range(3)) > 0


def test_load_there_before_the_job_is_in_the_reference() -> None:
    # A server already busy when the job starts: its probes are slow from the first.
    pacer = calibrated(Pacer(), probe=0.008)
    assert [pacer.observe(1, p, 0.2) for p in (0.008, 0.009, 0.0075)] == [0.0] * 3


def test_a_new_job_starts_unpaced_and_uncalibrated() -> None:
    pacer = calibrated(Pacer(weight=1.0))
    assert pacer.observe(1, 0.01, 0.1) > 0
    # Job 2's probes calibrate it afresh, however they compare with job 1's.
    assert pacer.observe(2, 0.05, 0.1) == 0.0 and pacer.factor == 0.0
    assert pacer.calibrating(2)


def test_no_probe_asks_for_nothing() -> None:
    pacer = Pacer()
    assert pacer.observe(1, 0.0, 0.3) == 0.0 and pacer.reference is None


def test_pacer_settings_are_checked() -> None:
    bad_settings: list[dict[str, float]] = [
        {"slowdown": 1.0},
        {"max_factor": 0.5},
        {"max_pause": -1.0},
        {"weight": 0.0},
        {"calibration": 0},
    ]
    for bad in bad_settings:
        with pytest.raises(ValueError, match="slowdown > 1"):
            Pacer(**bad)  # type: ignore[arg-type]


@pytest.fixture
async def table(postgres: Postgres) -> AsyncIterator[Table]:
    yield Table(f"rp_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)


async def test_each_batch_probes_the_database_and_a_busy_one_pauses_the_job(
    table: Table,
) -> None:
    store = table.store()
    await fill(store, ["acme"], 8)
    reindexer, sent = keeping(table, store)
    job = await reindexer.start(NEW, tenant="acme", batch=4)
    assert len(sent) == 4 and reindexer.pacer is not None  # 8 rows + 5 turns, by 4
    assert reindexer.pacer.calibrating(job.id)
    assert (await reindexer.run_batch(*sent[0])).endswith("vectors")
    # Before its first batch the process took its reference probes; after the write,
    # one more: nothing slower than before the job, so no pause.
    reference = reindexer.pacer.reference
    assert reference is not None and 0 < reference < 1
    # The reference as if the database had been far faster before the job than any
    # real probe can be (a nanosecond): the next batch's probe finds it slowed.
    reindexer.pacer = calibrated(Pacer(weight=1.0), job.id, 1e-9)
    assert (await reindexer.run_batch(*sent[1])).endswith("vectors")
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
