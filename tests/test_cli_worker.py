"""``tulip-memory worker ROLE``: one named solo worker per shard, restarted if it dies,
stopped gracefully."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.producer.queues import with_db


def celery_children(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """Live celery worker children (a killed one is a zombie until it is reaped)."""
    live = []
    for kid in psutil.Process(proc.pid).children(recursive=False):
        try:
            if "celery" in " ".join(kid.cmdline()):
                live.append(kid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return live


def wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition never held")


def test_worker_role_supervises_named_shard_workers(
    redis_url: str, worker_db: dict[str, str], tmp_path: Path
) -> None:
    broker = with_db(redis_url, 14)
    env = {
        **os.environ,
        "TULIP_BROKER_URL": broker,
        "TULIP_REDIS_URL": broker,
        **worker_db,
        "TULIP_EXTRACT_SHARDS": "3",
    }
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tulip_ops.cli", "worker", "extract", "--shards", "0", "2",
         "--log-dir", str(logs)],
        env=env, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: len(celery_children(proc)) == 2)
        for k in (0, 2):
            wait_for(lambda k=k: " ready." in _read(logs / f"extract-{k}.log"))
            assert f"extract-{k}@" in _read(logs / f"extract-{k}.log")
            assert f"memory.extract.{k}" in _read(logs / f"extract-{k}.log")
        assert not (logs / "extract-1.log").exists()
        victim = celery_children(proc)[0]
        victim.kill()
        wait_for(lambda: len(celery_children(proc)) == 2 and victim.pid not in
                 {c.pid for c in celery_children(proc)})  # fmt: skip
        children = celery_children(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        for child in children:
            assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            proc.kill()  # its workers get SIGTERM from the kernel (PR_SET_PDEATHSIG)
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_workers_do_not_outlive_a_killed_supervisor(
    redis_url: str, worker_db: dict[str, str], tmp_path: Path
) -> None:
    broker = with_db(redis_url, 14)
    env = {**os.environ, "TULIP_BROKER_URL": broker, **worker_db}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tulip_ops.cli", "worker", "extract", "--shards", "1",
         "--log-dir", str(tmp_path)],
        env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: " ready." in _read(tmp_path / "extract-1.log"))
        children = celery_children(proc)
        assert children
    finally:
        proc.kill()
        proc.wait()
    for child in children:
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            child.kill()
            raise AssertionError(f"worker {child.pid} outlived its supervisor") from None


def test_unknown_role_and_shard_are_refused() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "worker", "nonsense"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    out_of_range = subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "worker", "extract", "--shards", "9"],
        capture_output=True, text=True, check=False,
        env={**os.environ, "TULIP_EXTRACT_SHARDS": "2"},
    )  # fmt: skip
    assert out_of_range.returncode != 0 and "out of range" in out_of_range.stderr


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


pytestmark = pytest.mark.timeout(180)


def test_a_pooled_worker_gives_each_process_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reindex pool's children each get ``cores // processes`` threads for a local
    model, unless the operator set ``TULIP_EMBED_THREADS``; shard workers get none."""
    from tulip_ops.dev.supervisor import POOL_CONCURRENCY, role_specs

    monkeypatch.delenv("TULIP_EMBED_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    (spec,) = role_specs("reindex", 1)
    assert dict(spec.env) == {"TULIP_EMBED_THREADS": str(16 // POOL_CONCURRENCY)}
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    (spec,) = role_specs("reindex", 1)
    assert dict(spec.env) == {"TULIP_EMBED_THREADS": "1"}
    (shard,) = role_specs("extract", 1)
    assert "TULIP_EMBED_THREADS" not in dict(shard.env)

    monkeypatch.setenv("TULIP_EMBED_THREADS", "3")
    (spec,) = role_specs("reindex", 1)
    assert "TULIP_EMBED_THREADS" not in dict(spec.env)  # the environment's 3 reaches it
