"""Shard routing is stable across processes and matches the declared queues."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from tulip_producer import ShardRouter, stable_hash
from tulip_wire import celeryconfig, topology


def test_stable_hash_is_the_same_in_every_process() -> None:
    keys = ["tenant-a", "tenant-b/user/7", "ünïcode", ""]
    mine = [stable_hash(k) for k in keys]
    code = f"from tulip_wire.routing import stable_hash; print([stable_hash(k) for k in {keys!r}])"
    for seed in ("1", "2", "random"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.strip() == str(mine)


def test_router_spreads_keys_over_every_shard() -> None:
    router = ShardRouter("memory.extract", 4)
    counts = [0] * 4
    for i in range(4000):
        counts[router.shard(f"tenant-{i}")] += 1
    assert all(800 < c < 1200 for c in counts)
    assert router.queue("x") in router.queues()
    with pytest.raises(ValueError, match="shards must be >= 1"):
        ShardRouter("memory.extract", 0)


def test_declared_queues_cover_every_shard_and_role() -> None:
    names = {q.name for q in celeryconfig.task_queues}
    assert set(ShardRouter("memory.extract", celeryconfig.EXTRACT_SHARDS).queues()) <= names
    assert set(ShardRouter("memory.checkpoint", celeryconfig.CHECKPOINT_SHARDS).queues()) <= names
    assert {"memory.summarize", "memory.reindex"} <= names
    assert "memory.deadletter" not in names  # dead letters live in Postgres, not a queue
    assert all(q.routing_key == q.name for q in celeryconfig.task_queues)


def test_celeryconfig_declares_exactly_the_topology() -> None:
    declared = [
        (q.name, q.exchange.name, bool(q.queue_arguments)) for q in celeryconfig.task_queues
    ]
    specs = topology.declared_queues(celeryconfig.EXTRACT_SHARDS, celeryconfig.CHECKPOINT_SHARDS)
    rabbit = celeryconfig.broker_url.startswith(("amqp", "pyamqp"))
    assert declared == [(q.name, topology.EXCHANGE, q.ordered and rabbit) for q in specs]


def test_the_workers_register_every_task_of_the_topology() -> None:
    from tulip_workers.app import app

    app.loader.import_default_modules()
    names = {topology.EXTRACT_TASK, topology.CHECKPOINT_TASK}
    names |= {topology.SUMMARIZE_TASK, topology.REINDEX_TASK}
    assert names <= set(app.tasks)


def test_reliability_settings() -> None:
    assert celeryconfig.task_acks_late and celeryconfig.task_reject_on_worker_lost
    assert celeryconfig.worker_prefetch_multiplier == 1
    assert celeryconfig.accept_content == ["json"]
    visibility = celeryconfig.broker_transport_options["visibility_timeout"]
    assert visibility > celeryconfig.task_time_limit
    assert celeryconfig.worker_send_task_events


def test_rabbitmq_ordered_queues_have_a_single_active_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TULIP_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
    monkeypatch.setenv("TULIP_EXTRACT_SHARDS", "2")
    try:
        cfg = importlib.reload(celeryconfig)
        args = {q.name: q.queue_arguments for q in cfg.task_queues}
        assert args["memory.extract.1"] == {"x-single-active-consumer": True}
        assert args["memory.summarize"] == {}
    finally:
        monkeypatch.undo()
        importlib.reload(celeryconfig)


def test_bad_settings_fail_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TULIP_EXTRACT_SHARDS", "four")
    with pytest.raises(ValueError, match="TULIP_EXTRACT_SHARDS must be an integer"):
        importlib.reload(celeryconfig)
    monkeypatch.undo()
    importlib.reload(celeryconfig)


def test_worker_app_reads_celeryconfig() -> None:
    from tulip_workers.app import app

    assert app.conf.task_acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
