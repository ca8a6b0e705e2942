"""``tulip-memory dev``: the embedded services under one data directory.

Starts what exists of the stack, writes the settings it chose to ``tulip.env``
(``KEY=value`` lines an application or test can source), and stops everything it
started on exit. A second run on the same data directory reuses the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tulip_memory.dev.embedded import EmbeddedPostgres, EmbeddedRedis

ENV_FILE = "tulip.env"


@dataclass
class DevStack:
    data_dir: Path
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    settings: dict[str, str] = field(default_factory=dict)

    def start(self, *, with_redis: bool = True) -> DevStack:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.postgres = EmbeddedPostgres(self.data_dir / "postgres").start()
            self.settings["TULIP_DATABASE_URL"] = self.postgres.app_dsn
            self.settings["TULIP_DATABASE_ADMIN_URL"] = self.postgres.admin_dsn
            if with_redis:
                self.redis = EmbeddedRedis(self.data_dir / "redis").start()
                self.settings["TULIP_REDIS_URL"] = self.redis.url
                self.settings["TULIP_BROKER_URL"] = self.redis.url
            self._write_env()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def env_file(self) -> Path:
        return self.data_dir / ENV_FILE

    def _write_env(self) -> None:
        lines = [f"{k}={v}" for k, v in sorted(self.settings.items())]
        self.env_file.write_text("\n".join(lines) + "\n")

    def stop(self) -> None:
        """Stop what was started, newest first; safe to call twice."""
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
