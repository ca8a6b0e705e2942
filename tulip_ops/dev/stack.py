"""``tulip-memory dev``: the whole stack on embedded services under one data directory.

Starts Postgres 16 + pgvector and Redis (unix sockets), the workers of every role
that has tasks (one solo worker per extract shard), the HTTP service (with a key of
tenant ``demo``) and Flower, writes the settings it chose to ``tulip.env`` (see
:mod:`tulip_ops.dev.envfile`; 0600: it holds the DSNs, the Flower password and the
demo key; removed when the stack stops), and stops everything it started on exit. A second run on
the same data directory reuses the data: memories survive a restart. Two at once are
refused (:mod:`tulip_ops.dev.lock`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tulip_memory.private import write_private
from tulip_ops.claim import Claim
from tulip_ops.dev.embedded import EmbeddedPostgres, EmbeddedRedis
from tulip_ops.dev.envfile import render_env
from tulip_ops.dev.exporter import MetricsExporter
from tulip_ops.dev.flower import Flower
from tulip_ops.dev.http import HttpService, demo_key
from tulip_ops.dev.lock import DataDirLock
from tulip_ops.dev.supervisor import POOLED, ROLES, Supervisor, role_specs
from tulip_wire.endpoints import redis_client
from tulip_workers.settings import SHARD_LEASE_SECONDS

ENV_FILE = "tulip.env"


@dataclass
class DevStack:
    data_dir: Path
    shards: int = 2
    with_flower: bool = True
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    workers: Supervisor | None = None
    flower: Flower | None = None
    metrics: MetricsExporter | None = None
    http: HttpService | None = None
    settings: dict[str, str] = field(default_factory=dict)
    lock: DataDirLock | None = None

    def claim(self) -> DevStack:
        """Take the data directory; :class:`~tulip_ops.dev.lock.StackRunning`, with
        nothing touched, when another stack runs on it."""
        if self.lock is None:
            self.data_dir = self.data_dir.resolve()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.lock = DataDirLock(self.data_dir).acquire()
        return self

    def start(self) -> DevStack:
        """Claim the directory (if not yet done), then start everything."""
        self.claim()
        try:
            self._start_services()
            self._write_env()
            env = {**os.environ, **self.settings}
            # The shard roles as a pool of one member (tulip-memory worker <role> --claim):
            # a second stack's or a Procfile's members on the same Redis share the shards.
            specs = [s for role in POOLED for s in role_specs(role, self.shards)]
            claims = [self._claim(role) for role in ROLES]
            logs = self.data_dir / "logs"
            self.workers = Supervisor(specs, env, log_dir=logs, claims=claims).start()
            self.metrics = MetricsExporter(env, self.data_dir / "logs" / "metrics.log").start()
            self.settings["TULIP_METRICS_URL"] = self.metrics.url
            self._write_env()
            self._start_http(env)
            if self.with_flower:
                self.flower = Flower(env, self.data_dir / "logs" / "flower.log").start()
                self.settings["TULIP_FLOWER_URL"] = self.flower.url
                self.settings["TULIP_FLOWER_USER"] = self.flower.user
                self.settings["TULIP_FLOWER_PASSWORD"] = self.flower.password
                self._write_env()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_services(self) -> None:
        self.postgres = EmbeddedPostgres(self.data_dir / "postgres").start()
        self.redis = EmbeddedRedis(self.data_dir / "redis").start()
        self.settings.update(
            TULIP_DATABASE_URL=self.postgres.app_dsn,
            TULIP_DATABASE_ADMIN_URL=self.postgres.admin_dsn,
            TULIP_REDIS_URL=self.redis.url,
            TULIP_BROKER_URL=self.redis.url,
            TULIP_EXTRACT_SHARDS=str(self.shards),
            TULIP_CHECKPOINT_SHARDS=str(self.shards),
            TULIP_SPOOL_DIR=str(self.data_dir / "spool"),
            TULIP_CHECKPOINT_URL=f"file://{self.data_dir / 'checkpoints'}",
        )
        self._migrate_table()

    def _claim(self, role: str) -> Claim:
        assert self.redis is not None
        client = redis_client(self.redis.url, socket_timeout=5)
        return Claim(role, self.shards, client, SHARD_LEASE_SECONDS.read())

    def _start_http(self, env: dict[str, str]) -> None:
        """The HTTP service, its URL and a demo key of tenant ``demo`` in ``tulip.env``."""
        assert self.postgres is not None
        self.http = HttpService(env, self.data_dir / "logs" / "http.log").start()
        self.settings["TULIP_HTTP_URL"] = self.http.url
        self.settings["TULIP_HTTP_DEMO_KEY"] = demo_key(self.postgres.admin_dsn)
        self._write_env()

    def _migrate_table(self) -> None:
        """The configured memories table, migrated as the owner before any worker
        starts (the application role verifies, never migrates)."""
        from tulip_ops.provision import configured_store, migrate_now

        assert self.postgres is not None
        migrate_now(configured_store(self.postgres.admin_dsn, {**os.environ, **self.settings}))

    @property
    def env_file(self) -> Path:
        return self.data_dir / ENV_FILE

    def _write_env(self) -> None:
        # DSNs and the Flower password: owner-only (0600) whatever the umask.
        write_private(self.env_file, render_env(self.settings).encode(), fsync=False)

    def stop(self) -> None:
        """Stop what was started, newest first; safe to call twice."""
        if self.flower is not None:
            self.flower.stop()
            self.flower = None
        if self.http is not None:
            self.http.stop()
            self.http = None
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        if self.workers is not None:
            self.workers.stop()
            self.workers = None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
        if self.lock is not None:
            # The settings die with the stack: a tulip.env left behind would send a
            # program that sources it to sockets nobody listens on (its producer
            # spooling, its reader failing); a missing file says the stack is down.
            self.env_file.unlink(missing_ok=True)
            self.lock.release()
            self.lock = None
