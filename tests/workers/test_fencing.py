"""The lease and its fencing token on a real Redis: a lease is taken once, by one owner,
its token grows at every takeover; a renewal or release with an old token does nothing;
every fenced script refuses, changing nothing, once the lease carries another's token
(:mod:`tulip_workers.lease`, :mod:`tulip_workers.fencing`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tulip_wire.scripts import lua
from tulip_workers import fencing, reliable_redis
from tulip_workers.lease import LOST, RENEWED, TAKEN_BACK, ShardLease


class Ended(Exception):
    pass


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> str:
    def end(status: int) -> None:
        raise Ended(status)

    monkeypatch.setattr(fencing, "end", end)  # lost() would end this process
    monkeypatch.setattr(fencing, "_fences", {})
    return f"memory.extract.fence-{uuid.uuid4().hex[:8]}"


def test_one_owner_and_a_token_that_grows_at_every_takeover(
    client: redis.Redis, queue: str
) -> None:
    lease = ShardLease(client, "", queue, seconds=5)
    first, holder = lease.acquire("a/1")
    assert first > 0 and holder == "a/1"
    assert lease.acquire("b/2") == (0, "a/1")  # held: b is a standby
    assert lease.renew(first)
    client.delete(lease.key)  # lapsed
    second, _ = lease.acquire("b/2")
    assert second == first + 1
    assert not lease.renew(first) and not lease.release(first)  # the old owner's token
    assert client.hget(lease.key, "owner") == b"b/2"
    assert lease.release(second) and client.exists(lease.key) == 0


def test_fenced_scripts_refuse_and_change_nothing_with_an_old_token(
    client: redis.Redis, queue: str
) -> None:
    lease = ShardLease(client, "", queue, seconds=5)
    token, _ = lease.acquire("a/1")
    fencing.hold(fencing.Fence(queue, lease.key, str(token), float("inf")))
    source, delivering = f"{queue}:list", f"{queue}:delivering"
    client.lpush(source, b"m1", b"m2")
    consume = client.register_script(fencing.guarded(lua(reliable_redis.__file__, "consume.lua")))
    assert fencing.run(consume, queue, [source, delivering], []) == b"m1"
    client.delete(lease.key)
    lease.acquire("b/2")  # taken over: a new token
    with pytest.raises(Ended) as ended:
        fencing.run(consume, queue, [source, delivering], [])
    assert ended.value.args == (fencing.EXIT_FENCED,)
    assert client.lrange(source, 0, -1) == [b"m2"]  # nothing moved
    assert client.lrange(delivering, 0, -1) == [b"m1"]


def test_a_lease_lapsed_in_an_outage_is_taken_back_with_its_token_unless_another_took_it(
    client: redis.Redis, queue: str
) -> None:
    lease = ShardLease(client, "", queue, seconds=5)
    token, _ = lease.acquire("a/1")
    assert lease.keep("a/1", token) == RENEWED
    client.delete(lease.key)  # lapsed while Redis could not be reached (or restarted)
    assert lease.keep("a/1", token) == TAKEN_BACK  # nobody took it since: same token
    assert client.hget(lease.key, "token") == str(token).encode()
    assert 0 < client.pttl(lease.key) <= 5000
    assert lease.acquire("b/2") == (0, "a/1")
    client.delete(lease.key)
    second, _ = lease.acquire("b/2")  # taken over while a/1 was away
    client.delete(lease.key)  # and lapsed again
    assert lease.keep("a/1", token) == LOST  # the counter moved on: a/1 lost it
    assert client.exists(lease.key) == 0
    assert lease.keep("b/2", second) == TAKEN_BACK


def test_a_redis_that_lost_its_data_gives_tokens_above_the_old_ones(
    client: redis.Redis, queue: str
) -> None:
    lease = ShardLease(client, "", queue, seconds=5)
    old, _ = lease.acquire("a/1")
    client.delete(lease.key, f"tulip:fence:{queue}")  # no persistence: all gone
    assert lease.keep("a/1", old) == LOST  # no counter to say nobody took it
    new, _ = lease.acquire("b/2")
    assert new > old


def test_a_fenced_script_runs_once_the_lapsed_lease_is_taken_back(
    client: redis.Redis, queue: str
) -> None:
    lease = ShardLease(client, "", queue, seconds=5)
    token, _ = lease.acquire("a/1")
    fence = fencing.Fence(queue, lease.key, str(token), float("inf"))
    fence.keep = lambda: lease.keep("a/1", token) != LOST
    fencing.hold(fence)
    source, delivering = f"{queue}:list", f"{queue}:delivering"
    client.lpush(source, b"m1")
    consume = client.register_script(fencing.guarded(lua(reliable_redis.__file__, "consume.lua")))
    client.delete(lease.key)  # lapsed in an outage, nobody took it
    assert fencing.run(consume, queue, [source, delivering], []) == b"m1"
    assert client.lrange(delivering, 0, -1) == [b"m1"]
