"""``tulip-memory dev`` as a user runs it: a real process, real services."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import asyncpg
import psutil
import redis

from tests.docs.stack import read_env_file
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_producer import Producer, ProducerSettings, Reader
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter

CLI = [sys.executable, "-m", "tulip_ops.cli"]


def _status(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_dev_serves_until_interrupted_leaves_nothing_behind_and_the_demo_passes_after(
    server_dir: Path,
) -> None:
    proc = subprocess.Popen([*CLI, "dev", "--data-dir", str(server_dir)], stdout=subprocess.PIPE)
    try:
        env = read_env_file(server_dir / "tulip.env", "TULIP_FLOWER_URL", proc, timeout=120)
        client = redis.Redis.from_url(env["TULIP_REDIS_URL"])
        assert client.ping()
        redis_pid = int(client.info()["process_id"])
        client.close()

        async def pg_alive() -> bool:
            conn = await asyncpg.connect(env["TULIP_DATABASE_URL"])
            try:
                return bool(await conn.fetchval("SELECT true"))
            finally:
                await conn.close()

        assert asyncio.run(pg_alive())
        postmaster = int((server_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        assert psutil.pid_exists(postmaster)
        flower = env["TULIP_FLOWER_URL"]
        assert _status(f"{flower}/api/workers") == 401
        creds = (env["TULIP_FLOWER_USER"], env["TULIP_FLOWER_PASSWORD"])
        assert _status(f"{flower}/api/workers", creds) == 200
        with urllib.request.urlopen(env["TULIP_METRICS_URL"], timeout=10) as response:
            exported = response.read().decode()
        assert 'tulip_queue_depth{queue="memory.extract.0"} 0.0' in exported
        assert "tulip_broker_up 1.0" in exported
        # The HTTP service, and a key of tenant demo that works with it and no other.
        demo_key = {"Authorization": f"Bearer {env['TULIP_HTTP_DEMO_KEY']}"}
        mine = urllib.request.Request(
            f"{env['TULIP_HTTP_URL']}/v1/memories?namespace=demo", headers=demo_key
        )
        with urllib.request.urlopen(mine, timeout=10) as response:
            assert json.loads(response.read()) == {"memories": []}
        assert _status(f"{env['TULIP_HTTP_URL']}/v1/memories?namespace=demo") == 401
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3  # two extract shard workers and Flower
        _assert_no_secret_in_any_cmdline(env["TULIP_FLOWER_PASSWORD"])
        _assert_no_secret_in_any_cmdline(env["TULIP_HTTP_DEMO_KEY"])
        assert stat.S_IMODE((server_dir / "tulip.env").stat().st_mode) == 0o600
        assert stat.S_IMODE((server_dir / "redis").stat().st_mode) == 0o700
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
        assert not (server_dir / "tulip.env").exists()
        for pid in [redis_pid, postmaster, *(c.pid for c in children)]:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid
    finally:
        if proc.poll() is None:  # a failed assertion: still stop what dev started
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
    # Data survives: the demo, run next on the same directory, finds the role and
    # database, passes and reports (one dev start fewer than a demo of its own).
    demo = subprocess.run(
        [*CLI, "dev", "--demo", "--data-dir", str(server_dir), "--tenants", "2", "--users", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ},
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "facts recalled    50/50" in demo.stdout
    assert "tenant isolation  holds" in demo.stdout
    # A stopped stack leaves no settings to source, and no PID in its lock.
    assert not (server_dir / "tulip.env").exists()
    assert (server_dir / "dev.lock").read_text() == ""


def _assert_no_secret_in_any_cmdline(secret: str) -> None:
    """Every process's argv (world-readable in /proc) is free of ``secret``."""
    assert len(secret) >= 12
    seen = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        seen += 1
        assert secret.encode() not in argv, argv.replace(b"\0", b" ")[:200]
    assert seen > 3


def _start_dev(data: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    if (data / "tulip.env").exists():
        (data / "tulip.env").unlink()
    proc = subprocess.Popen([*CLI, "dev", "--data-dir", str(data)], stdout=subprocess.DEVNULL)
    return proc, read_env_file(data / "tulip.env", "TULIP_FLOWER_URL", proc, timeout=120)


def _stop_dev(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_applied(reader: Reader, ids: list[str], tenant: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(reader.status(e, tenant=tenant).state == "applied" for e in ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"not applied: {[reader.status(e, tenant=tenant) for e in ids]}")


def _shard_worker(proc: subprocess.Popen[bytes], queue: str) -> psutil.Process | None:
    for child in psutil.Process(proc.pid).children():
        try:
            if queue in child.cmdline():
                return child
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return None


def test_an_application_sourcing_the_env_file_publishes_recalls_and_survives(
    server_dir: Path,
) -> None:
    """One ``dev`` start serves every check of a running one (a second is refused,
    the env file, publish and recall through a killed shard worker); a second start on
    the same directory keeps the memories and the thread."""
    ns = ("acme", "users", "u1")
    thread_state = AgentState(messages=(Message(role=Role.USER, content="hello"),), iterations=1)
    proc, env = _start_dev(server_dir)
    try:
        _assert_a_second_dev_is_refused_and_changes_nothing(proc, server_dir, env)
        _assert_sourcing_exports_every_setting(server_dir / "tulip.env", env)
        settings = ProducerSettings.from_env(env)
        with Producer(settings) as producer, Reader.from_env(env) as reader:
            first = producer.session_ended(ns, "t", [_said("My favourite colour is red.")])
            _wait_applied(reader, [first], ns[0])
            assert "red" in reader.recall(ns, "favourite colour")[0].content
            assert reader.status(first[::-1], tenant="acme").state == "unknown"
            # The supervisor restarts a killed shard worker; the shard's events still
            # apply, in order.
            queue = ShardRouter("memory.extract", settings.extract_shards).queue(namespace_key(ns))
            victim = _shard_worker(proc, queue)
            assert victim is not None
            victim.kill()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                again = _shard_worker(proc, queue)
                if again is not None and again.pid != victim.pid:
                    break
                time.sleep(0.2)
            ids = [
                producer.session_ended(ns, "t", [_said(f"Actually, my favourite colour is {c}.")])
                for c in ("blue", "green", "amber")
            ]
            _wait_applied(reader, ids, ns[0])
            assert "amber" in reader.recall(ns, "favourite colour")[0].content
            producer.checkpoint_saved("ticket-1", thread_state, tenant="acme")
            assert reader.load("ticket-1", tenant="acme") == thread_state
            assert reader.load("ticket-1", tenant="globex") is None
    finally:
        _stop_dev(proc)
    # A second dev on the same data directory keeps the memories and the thread.
    proc, env = _start_dev(server_dir)
    try:
        with Reader.from_env(env) as reader:
            assert "amber" in reader.recall(ns, "favourite colour")[0].content
            assert reader.load("ticket-1", tenant="acme") == thread_state
    finally:
        _stop_dev(proc)


def _said(text: str) -> Message:
    return Message(role=Role.USER, content=text)


def _assert_a_second_dev_is_refused_and_changes_nothing(
    proc: subprocess.Popen[bytes], data: Path, env: dict[str, str]
) -> None:
    """A second ``dev`` on the running directory exits with one line naming the first,
    and leaves its settings, socket and workers as they were."""
    env_text = (data / "tulip.env").read_text()
    socket = Path(env["TULIP_REDIS_URL"].removeprefix("unix://").split("?")[0])
    workers = {c.pid for c in psutil.Process(proc.pid).children()}
    second = subprocess.run(
        [*CLI, "dev", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert second.returncode == 1
    assert second.stdout == ""
    [line] = second.stderr.splitlines()
    assert f"PID {proc.pid}" in line and str(data) in line
    assert (data / "tulip.env").read_text() == env_text
    assert socket.exists()
    assert {c.pid for c in psutil.Process(proc.pid).children()} == workers


def _assert_sourcing_exports_every_setting(path: Path, env: dict[str, str]) -> None:
    """`source tulip.env` exports every setting to the shell's children."""
    exported = subprocess.run(
        ["bash", "-c", f"source {path} && env -0"],
        capture_output=True, text=True, timeout=30, check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout  # fmt: skip
    child_env = dict(item.split("=", 1) for item in exported.split("\0") if "=" in item)
    assert {k: child_env.get(k) for k in env} == env
