"""The stack the documentation's examples run against: ``tulip-memory dev`` as a reader
starts it (embedded Postgres and Redis, the workers, Flower), plus the S3 API (moto)
for the examples that name a bucket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import honcho.environ

CLI = [sys.executable, "-m", "tulip_ops.cli"]
#: The buckets the docs' examples name.
BUCKETS = ("tulip-threads",)


@dataclass(frozen=True)
class DevStack:
    data_dir: Path
    env: dict[str, str]


def read_env_file(
    path: Path, key: str, proc: subprocess.Popen[bytes], timeout: float
) -> dict[str, str]:
    """``tulip.env`` as ``source`` reads it, once it holds ``key``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tulip-memory dev exited {proc.returncode} before it was ready")
        if path.exists():
            text = path.read_text()
            if text.endswith("\n") and f"{key}=" in text:
                return dict(honcho.environ.parse(text))
        time.sleep(0.2)
    raise AssertionError(f"{path} never held {key}")


def dev_stack(s3_endpoint: str) -> Iterator[DevStack]:
    """Start ``tulip-memory dev`` on a fresh directory (not under pytest's tmp root: the
    embedded Postgres's user must traverse its parents), yield it ready, stop it with
    Ctrl-C as a user would."""
    data = Path(tempfile.mkdtemp(prefix="tulip-docs-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    log = (data.parent / f"{data.name}.log").open("wb")
    proc = subprocess.Popen(
        [*CLI, "dev", "--data-dir", str(data), "--shards", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # The workers are up once Flower's URL is written (dev writes it last).
        settings = read_env_file(data / "tulip.env", "TULIP_FLOWER_URL", proc, timeout=240)
        settings["TULIP_S3_ENDPOINT_URL"] = s3_endpoint
        s3 = boto3.client("s3", endpoint_url=s3_endpoint)
        for bucket in BUCKETS:
            s3.create_bucket(Bucket=bucket)
        yield DevStack(data, settings)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["rm", "-rf", str(data)], check=False)
