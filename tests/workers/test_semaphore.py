"""RedisSemaphore bounds holders across processes, and frees a dead holder's slot."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tulip_memory.errors import TulipMemoryError
from tulip_wire.topology import SEMAPHORE_PREFIX
from tulip_workers.semaphore import RedisSemaphore, SemaphoreTimeout, semaphore_from_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def holder(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.semaphore_holder", *map(str, args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_bounds_concurrent_holders_across_processes(
    client: redis.Redis, redis_url: str, name: str
) -> None:
    limit, parties, rounds = 3, 6, 5
    key = f"test:{name}:holding"
    procs = [
        holder("contend", redis_url, name, limit, rounds, 0.1, key, parties) for _ in range(parties)
    ]
    try:
        assert [p.wait(60) for p in procs] == [0] * parties
    finally:
        for p in procs:
            p.kill()
            p.wait()
    seen = [int(v) for v in client.lrange(f"{key}:seen", 0, -1)]
    assert len(seen) == parties * rounds
    assert max(seen) == limit  # never more than the limit, and the limit was reached
    assert RedisSemaphore(client, name, limit).holders() == 0


def test_a_killed_holders_slot_frees_when_its_lease_ends(
    client: redis.Redis, redis_url: str, name: str
) -> None:
    lease = 1.5
    proc = holder("hold", redis_url, name, 1, lease)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        seen_held = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        sem = RedisSemaphore(client, name, 1)
        assert sem.try_acquire() is None  # the dead holder's lease still counts
        token = sem.acquire(timeout=10)
        assert time.monotonic() - seen_held > lease - 0.3
        assert sem.release(token)
    finally:
        proc.kill()
        proc.wait()


def test_release_of_unknown_or_expired_token_is_harmless(client: redis.Redis, name: str) -> None:
    short = RedisSemaphore(client, name, 2, lease_seconds=0.2)
    expired = short.acquire(timeout=1)
    other = RedisSemaphore(client, name, 2).acquire(timeout=1)
    time.sleep(0.3)
    assert short.release("no-such-token") is False
    assert short.release(expired) is False
    assert short.release(expired) is False
    assert short.holders() == 1  # the live holder is untouched
    assert short.release(other) is True


def test_renew_extends_a_live_lease_but_never_revives_an_expired_one(
    client: redis.Redis, name: str
) -> None:
    sem = RedisSemaphore(client, name, 1, lease_seconds=1.0)
    token = sem.acquire(timeout=1)
    time.sleep(0.6)
    assert sem.renew(token)
    time.sleep(0.6)  # 1.2 s after acquiring: held only thanks to the renewal
    assert sem.try_acquire() is None
    time.sleep(0.8)
    assert sem.renew(token) is False
    assert sem.try_acquire() is not None


def test_acquire_times_out_with_an_error_under_the_root(client: redis.Redis, name: str) -> None:
    sem = RedisSemaphore(client, name, 1)
    with sem.slot(timeout=1):
        started = time.monotonic()
        with pytest.raises(SemaphoreTimeout) as caught:
            sem.acquire(timeout=0.3)
        assert 0.3 <= time.monotonic() - started < 1.0
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, TulipMemoryError)
    assert (caught.value.name, caught.value.limit, caught.value.timeout) == (name, 1, 0.3)


def test_slot_is_released_when_the_block_raises(client: redis.Redis, name: str) -> None:
    sem = RedisSemaphore(client, name, 1)
    with pytest.raises(RuntimeError), sem.slot(timeout=1):
        assert sem.holders() == 1
        raise RuntimeError("boom")
    assert sem.holders() == 0


def test_a_slot_held_past_its_lease_is_renewed_so_the_limit_holds(
    client: redis.Redis, name: str
) -> None:
    sem = RedisSemaphore(client, name, 1, lease_seconds=0.3)
    with sem.slot(timeout=1):
        for _ in range(10):  # 1.5 s: five leases long
            time.sleep(0.15)
            assert sem.try_acquire() is None
    assert sem.holders() == 0 and sem.try_acquire() is not None


async def test_an_aslot_held_past_its_lease_is_renewed_so_the_limit_holds(
    client: redis.Redis, name: str
) -> None:
    sem = RedisSemaphore(client, name, 1, lease_seconds=0.3)
    async with sem.aslot(timeout=1):
        with pytest.raises(SemaphoreTimeout):
            await sem.aacquire(timeout=1.5)
    assert sem.holders() == 0


def test_a_lease_lost_while_held_is_reported(
    client: redis.Redis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    sem = RedisSemaphore(client, name, 1, lease_seconds=5)
    with sem.slot(timeout=1) as token:
        client.zrem(sem.key, token)  # as if the holder had been paused past its lease
    assert "expired while held" in caplog.text


def test_leases_live_in_one_sorted_set_under_our_prefix(client: redis.Redis, name: str) -> None:
    sem = RedisSemaphore(client, name, 2, lease_seconds=5)
    token = sem.acquire(timeout=1)
    assert sem.key == f"{SEMAPHORE_PREFIX}{name}"
    expiry_ms = client.zscore(sem.key, token)
    seconds, micros = client.time()
    assert expiry_ms is not None
    assert 4000 < expiry_ms - (seconds * 1000 + micros / 1000) <= 5000  # server clock
    assert 0 < client.pttl(sem.key) <= 5000  # an abandoned semaphore disappears
    sem.release(token)


@pytest.mark.parametrize(
    ("limit", "lease"),
    [
        (0, 60.0),
        (-1, 60.0),
        (True, 60.0),
        (1.5, 60.0),
        (1, 0.0),
        (1, -1.0),
        (1, math.nan),
        (1, math.inf),
    ],
)
def test_limit_and_lease_are_validated(
    client: redis.Redis, name: str, limit: int, lease: float
) -> None:
    with pytest.raises(ValueError):
        RedisSemaphore(client, name, limit, lease_seconds=lease)


def test_name_and_timeout_are_validated(client: redis.Redis, name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        RedisSemaphore(client, "", 1)
    with pytest.raises(ValueError, match="timeout"):
        RedisSemaphore(client, name, 1).acquire(timeout=-1)


async def test_aslot_bounds_coroutines_without_blocking_the_loop(
    client: redis.Redis, name: str
) -> None:
    sem = RedisSemaphore(client, name, 2)
    holding, most, ticks = 0, 0, 0

    async def work() -> None:
        nonlocal holding, most
        async with sem.aslot(timeout=10):
            holding += 1
            most = max(most, holding)
            await asyncio.sleep(0.1)
            holding -= 1

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    tick = asyncio.create_task(ticker())
    started = time.monotonic()
    await asyncio.gather(*(work() for _ in range(6)))
    elapsed = time.monotonic() - started
    tick.cancel()
    assert most == 2
    assert sem.holders() == 0
    assert ticks > elapsed / 0.01 / 3  # the loop kept running while coroutines waited


async def test_cancelled_aacquire_gives_back_a_slot_it_won(
    client: redis.Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sem = RedisSemaphore(client, name, 1)
    won: list[str | None] = []
    real = sem.try_acquire

    def slow_try_acquire(tenant: str | None = None) -> str | None:
        time.sleep(0.2)  # the Redis round trip is in flight when the task is cancelled
        won.append(real())
        return won[-1]

    monkeypatch.setattr(sem, "try_acquire", slow_try_acquire)
    task = asyncio.create_task(sem.aacquire(timeout=5))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.5)
    assert won and won[0] is not None  # the thread did win a slot...
    assert sem.holders() == 0  # ...and it was given back


async def test_aacquire_times_out(client: redis.Redis, name: str) -> None:
    sem = RedisSemaphore(client, name, 1)
    async with sem.aslot(timeout=1):
        with pytest.raises(SemaphoreTimeout):
            await sem.aacquire(timeout=0.2)
    assert sem.holders() == 0


def test_semaphore_from_env(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("TULIP_REDIS_URL", redis_url)
    monkeypatch.delenv("TULIP_LLM_MAX_INFLIGHT", raising=False)
    sem = semaphore_from_env()
    assert (sem.name, sem.limit, sem.key) == ("llm", 8, f"{SEMAPHORE_PREFIX}llm")
    monkeypatch.setenv("TULIP_LLM_MAX_INFLIGHT", "3")
    sem = semaphore_from_env("other")
    assert (sem.name, sem.limit) == ("other", 3)
    assert sem.holders() == 0  # really connected
    for bad in ("x", "0"):
        monkeypatch.setenv("TULIP_LLM_MAX_INFLIGHT", bad)
        with pytest.raises(ValueError, match="TULIP_LLM_MAX_INFLIGHT"):
            semaphore_from_env()


def test_semaphore_from_env_falls_back_to_a_redis_broker(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.delenv("TULIP_REDIS_URL", raising=False)
    monkeypatch.delenv("TULIP_LLM_MAX_INFLIGHT", raising=False)
    monkeypatch.setenv("TULIP_BROKER_URL", redis_url)
    assert semaphore_from_env().holders() == 0


def test_a_freed_slot_goes_to_the_tenant_waiting_for_its_turn_not_the_busiest(
    client: redis.Redis, name: str
) -> None:
    sem = RedisSemaphore(client, name, 2)
    held = [sem.acquire(tenant="noisy"), sem.acquire(tenant="noisy")]
    got: list[str] = []

    def wait_for_slot(tenant: str) -> None:
        token = sem.acquire(timeout=20, tenant=tenant)
        got.append(tenant)
        time.sleep(0.3)
        sem.release(token)

    noisy = [threading.Thread(target=wait_for_slot, args=("noisy",)) for _ in range(6)]
    for t in noisy:
        t.start()
    time.sleep(0.3)  # the noisy tenant's calls wait first
    quiet = threading.Thread(target=wait_for_slot, args=("quiet",))
    quiet.start()
    time.sleep(0.3)
    sem.release(held.pop())
    for t in [quiet, *noisy]:
        t.join(30)
    sem.release(held.pop())
    assert got[0] == "quiet" and got.count("noisy") == 6


def test_a_tenant_holds_at_most_its_share_of_the_cap(client: redis.Redis, name: str) -> None:
    sem = RedisSemaphore(client, name, 4, tenant_share=0.5)
    mine = [sem.try_acquire(tenant="noisy") for _ in range(3)]
    assert mine[2] is None and None not in mine[:2]  # 2 of 4, though 2 are free
    assert sem.try_acquire(tenant="quiet") is not None
    assert sem.holders() == 3
