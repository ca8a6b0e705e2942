"""``tulip-memory reshard`` during traffic: every namespace's sessions are still
extracted in the order they were published, none lost or superseded, while keys move
to other shards (real workers, a real producer, the command as a process)."""

from __future__ import annotations

import subprocess
import sys
import time

import redis

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.pipeline.test_concurrency import RecordingModel, first_asks, model_env, said
from tests.support.openai_server import FakeOpenAI
from tests.support.workers import WorkerProcess
from tulip_ops.dev.supervisor import role_specs
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import ShardLayout, layout_key
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX

NEW = 3
ROUNDS = 6
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def shard_worker(pipeline: Pipeline, shards: int, k: int, env: dict[str, str]) -> WorkerProcess:
    """Shard ``k`` of ``shards``' extract worker (not started yet)."""
    (spec,) = role_specs("extract", shards, [k], 4)
    run_env = {**pipeline.env(TULIP_EXTRACT_SHARDS=str(shards), **env), **dict(spec.env)}
    return pipeline.workers.threaded(
        f"{spec.name}-of-{shards}", list(spec.queues), spec.concurrency, run_env
    )


def test_a_reshard_during_traffic_keeps_every_namespace_in_order(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    """The old shards hold a backlog when the reshard starts, and the new shard's worker
    is already listening: only the drain keeps a moved namespace's later sessions from
    running before its earlier ones."""
    model = RecordingModel(delay=0.2)
    fake_openai.default_chat = model
    users = [f"r{i}" for i in range(24)]
    old, new = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS), ShardRouter(EXTRACT_QUEUE_PREFIX, NEW)
    moving = [u for u in users if new.shard(_key(u)) >= SHARDS]
    assert len(moving) >= 5 and all(old.shard(_key(u)) < SHARDS for u in moving)
    env = model_env(fake_openai, TULIP_LLM_MAX_INFLIGHT="16")
    # Listening from the start: a premature switch shows.
    pipeline.workers.start_all([shard_worker(pipeline, NEW, k, env) for k in range(SHARDS, NEW)])
    records = redis.Redis.from_url(pipeline.broker_url)
    ids: list[str] = []

    with pipeline.producer() as producer:

        def publish(*rounds: int) -> None:
            for n in rounds:
                for user in users:
                    ids.append(producer.session_ended(("acme", "users", user), "t", said(user, n)))

        publish(1, 2)  # queued on the old shards, whose workers are not up yet
        reshard = subprocess.Popen(
            [sys.executable, "-m", "tulip_ops.cli", "reshard", "--extract", str(NEW),
             "--grace", "1", "--timeout", "240"],
            cwd=ROOT, env={**_base_env(), **pipeline.env()}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not draining(records):
            assert time.monotonic() < deadline and reshard.poll() is None
            time.sleep(0.01)
        publish(3, 4)  # while the old shards drain
        assert producer.spooled == 2 * len(users)  # held in the spool, not published
        # The old layout's workers start on their backlog.
        pipeline.workers.start_all([shard_worker(pipeline, SHARDS, k, env) for k in range(SHARDS)])
        output, _ = reshard.communicate(timeout=300)
        assert reshard.returncode == 0, output
        assert f"now {NEW} shards" in output
        publish(5, 6)  # by the new layout
        assert producer.flush(timeout=60)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=240)
        assert {reader.status(e, tenant="acme").state for e in ids} == {"applied"}
    for user in users:
        assert first_asks(model.asked[user]) == list(range(1, ROUNDS + 1)), (
            user,
            model.asked[user],
        )


def draining(records: redis.Redis) -> bool:
    layout = ShardLayout.parse(records.get(layout_key(EXTRACT_QUEUE_PREFIX)))
    return layout is not None and layout.draining_from is not None


def _key(user: str) -> str:
    return namespace_key(("acme", "users", user))


def _base_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return env
