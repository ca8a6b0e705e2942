"""What a checkpoint worker's write costs per save on a long thread, onto the state it
wrote last (the shipped path) against always reading the head and the base first.

Each LoCoMo thread is saved turn by turn through a real :class:`~tulip_producer.Producer`
(deltas on an embedded Redis), and each event is taken off its queue and written by
:meth:`CheckpointWorker._write` to S3 (a moto server in a subprocess): the store write
alone, without the ledger's Postgres transactions, which cost the same on both paths.
**reading** is the same worker with the path onto its own head turned off (every delta
loads its base from the store and is applied and checked whole). Runs alternate.

Usage: ``python -m bench.worker_path --dataset '../shared/data/locomo10/47.json'``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

from kombu import Connection

from bench.checkpoints import moto_server, threads_from
from tulip_memory.delta import DeltaCheckpointer, S3DeltaStorage
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_producer import Producer, ProducerSettings
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import decode
from tulip_workers.checkpoints import CheckpointWorker


class ReadingPathWorker(CheckpointWorker):
    """The worker without the path onto its own head: every delta reads first."""

    async def _onto_written(self, *args: Any) -> AgentState | None:
        return None


async def run(
    url: str, endpoint: str, states: list[AgentState], reading: bool
) -> tuple[list[float], list[float]]:
    import boto3

    bucket = f"tulip-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    storage = S3DeltaStorage(bucket, "bench", endpoint_url=endpoint, region_name="us-east-1")
    kind = ReadingPathWorker if reading else CheckpointWorker
    worker = kind(store=cast(PgMemory, None), checkpointer=DeltaCheckpointer(storage))
    settings = ProducerSettings(
        broker_url=url, redis_url=url, spool_dir=Path(tempfile.mkdtemp()) / "spool",
        checkpoint_shards=1, extract_shards=1, publish_timeout=30.0,
    )  # fmt: skip
    thread = f"w-{uuid.uuid4().hex[:6]}"
    wall: list[float] = []
    cpu: list[float] = []
    with Producer(settings) as producer, Connection(kombu_url(url)) as conn:
        queue = conn.SimpleQueue("memory.checkpoint.0")
        for state in states:
            producer.checkpoint_saved(thread, state, tenant="bench")
            message = queue.get(timeout=30)
            message.ack()
            env = decode(json.loads(message.body)[0][0])
            assert env.payload is not None
            t0, c0 = time.perf_counter(), time.thread_time()
            await worker._write(env, env.payload)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
        queue.close()
    assert await worker.threads("bench").load(thread) == states[-1]
    await storage.close()
    return wall, cpu


def main() -> None:
    from tulip_ops.dev.embedded import EmbeddedRedis

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", action="append", required=True, help="LoCoMo JSON (glob)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each path, alternating")
    args = parser.parse_args()
    args.threads, args.turns = 0, 0
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(var, "bench")
    print(f"{'thread':<16}{'path':>9} | {'wall p50':>9}{'cpu p50':>8} | last 100 saves: "
          f"{'wall':>7}{'cpu':>7}  (ms per save)")  # fmt: skip
    with tempfile.TemporaryDirectory() as d, moto_server() as endpoint:
        redis = EmbeddedRedis(Path(d) / "redis")
        url = redis.start().url
        try:
            for t in threads_from(args):
                for _ in range(args.rounds):
                    for reading in (True, False):
                        wall, cpu = asyncio.run(run(url, endpoint, t.states, reading))
                        med = statistics.median
                        print(
                            f"{t.name[-16:]:<16}{'reading' if reading else 'onto':>9} | "
                            f"{med(wall):>9.2f}{med(cpu):>8.2f} | {'':>15}"
                            f"{med(wall[-100:]):>7.2f}{med(cpu[-100:]):>7.2f}",
                            flush=True,
                        )
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
