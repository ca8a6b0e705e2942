"""A pool that claims shards: three ``tulip-memory worker extract --claim`` members over
eight shards own every shard exactly once, and when one member dies with its host (its
process group SIGKILLed) the two left take its shards over (:mod:`tulip_ops.claim`).

Real member processes, each running its shard workers as ``celery worker`` processes; a
short lease; the pipeline tests' broker and database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from tests.pipeline.conftest import Pipeline
from tests.support.workers import ROOT, worker_env
from tulip_wire.topology import lease_key, members_key

SHARDS = 8
LEASE = 1.5


def start_member(pipeline: Pipeline, log_dir: Path) -> subprocess.Popen[bytes]:
    env = worker_env(
        **pipeline.env(
            TULIP_EXTRACT_SHARDS=str(SHARDS),
            TULIP_SHARD_LEASE_SECONDS=str(LEASE),
            TULIP_EXTRACT_CONCURRENCY="1",
        )
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    out = open(log_dir / "member.log", "ab")  # noqa: SIM115 - the child holds it
    argv = [sys.executable, "-m", "tulip_ops.cli", "worker", "extract", "--claim"]
    return subprocess.Popen(
        [*argv, "--log-dir", str(log_dir)],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: killed with its workers
    )


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def owners(client: redis.Redis) -> dict[int, int | None]:
    """Each leased shard's owning member (the pid of its worker's supervisor)."""
    found: dict[int, int | None] = {}
    for k in range(SHARDS):
        owner = client.hget(lease_key(f"memory.extract.{k}"), "owner")
        if owner is not None:
            found[k] = parent_of(int(str(owner).rsplit("/", 1)[1]))
    return found


def wait_owned(client: redis.Redis, members: set[int], timeout: float = 120) -> dict[int, int]:
    """Until every shard is owned by a worker of one of ``members``, balanced."""
    deadline = time.monotonic() + timeout
    seen: dict[int, int | None] = {}
    while time.monotonic() < deadline:
        seen = owners(client)
        per = Counter(seen.values())
        if (
            len(seen) == SHARDS
            and set(per) == members
            and max(per.values()) - min(per.values()) <= 1
        ):
            return {k: v for k, v in seen.items() if v is not None}
        time.sleep(0.2)
    raise AssertionError(f"shards not owned by {members}: {seen}")


def test_three_members_own_eight_shards_once_and_rebalance_when_one_dies(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(pipeline.broker_url, decode_responses=True)
    members = [start_member(pipeline, tmp_path / f"m{i}") for i in range(3)]
    try:
        owned = wait_owned(client, {m.pid for m in members})
        assert sorted(Counter(owned.values()).values()) == [2, 3, 3]
        assert client.zcard(members_key("extract")) == 3
        dead = members[0]
        os.killpg(dead.pid, signal.SIGKILL)  # the member and its workers, as a lost host
        dead.wait(10)
        left = {m.pid for m in members[1:]}
        owned = wait_owned(client, left)
        assert sorted(Counter(owned.values()).values()) == [4, 4]
        assert client.zcard(members_key("extract")) == 2
    finally:
        for m in members:
            if m.poll() is None:
                m.send_signal(signal.SIGTERM)
        for m in members:
            try:
                m.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(m.pid, signal.SIGKILL)
                m.wait(10)
