"""Processes that hold slots of a :class:`~tulip_workers.semaphore.RedisSemaphore`.

``python -m tests.support.semaphore_holder contend URL NAME LIMIT ROUNDS HOLD KEY PARTIES``
waits until ``PARTIES`` processes are ready, then takes a slot ``ROUNDS`` times; while
holding it increments the counter ``KEY`` and appends the value it got to ``KEY:seen``,
so the test sees how many holders there were at once, measured.

``python -m tests.support.semaphore_holder hold URL NAME LIMIT LEASE`` takes one slot,
prints ``held`` and sleeps until it is killed.
"""

from __future__ import annotations

import sys
import time

import redis

from tulip_workers.semaphore import RedisSemaphore


def contend(
    url: str, name: str, limit: int, rounds: int, hold: float, key: str, parties: int
) -> None:
    client = redis.Redis.from_url(url)
    sem = RedisSemaphore(client, name, limit, lease_seconds=30.0)
    client.incr(f"{key}:ready")
    while int(client.get(f"{key}:ready") or 0) < parties:
        time.sleep(0.01)
    for _ in range(rounds):
        with sem.slot(timeout=30.0):
            client.rpush(f"{key}:seen", client.incr(key))
            time.sleep(hold)
            client.decr(key)


def hold(url: str, name: str, limit: int, lease: float) -> None:
    sem = RedisSemaphore(redis.Redis.from_url(url), name, limit, lease_seconds=lease)
    sem.acquire(timeout=10.0)
    print("held", flush=True)
    time.sleep(3600)


def main(argv: list[str]) -> None:
    if argv[0] == "contend":
        url, name, limit, rounds, pause, key, parties = argv[1:]
        contend(url, name, int(limit), int(rounds), float(pause), key, int(parties))
    elif argv[0] == "hold":
        url, name, limit, lease = argv[1:]
        hold(url, name, int(limit), float(lease))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
