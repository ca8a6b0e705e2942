"""No role guesses a broker: without ``TULIP_BROKER_URL`` each refuses to start with
the producer's one-line error, and a connection made anyway (Flower or ``celery
inspect`` by hand) fails with it instead of reaching some local Redis."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tulip_producer.settings import ProducerSettings
from tulip_wire.env import MISSING_BROKER_URL


def free_port() -> int:
    """A port nothing listens on now (the refusal comes before any bind, but a metrics
    exporter started by mistake must not take a well-known one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CELERY = [sys.executable, "-m", "celery", "-A", "tulip_workers.app"]
CLI = [sys.executable, "-m", "tulip_ops.cli"]


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.mark.parametrize(
    "argv",
    [
        [*CLI, "worker", "extract"],
        [*CLI, "worker", "summarize"],
        [*CLI, "metrics", "--port", str(free_port())],
        [*CELERY, "worker", "-P", "solo", "-Q", "memory.extract.0"],
    ],
    ids=["worker extract", "worker summarize", "metrics", "celery worker"],
)
def test_every_role_refuses_to_start_without_a_broker(argv: list[str]) -> None:
    done = run(argv)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {MISSING_BROKER_URL}"]


def test_the_producer_gives_the_same_error() -> None:
    with pytest.raises(ValueError) as refused:
        ProducerSettings.from_env({})
    assert str(refused.value).startswith(MISSING_BROKER_URL)


def test_a_connection_made_anyway_fails_with_it() -> None:
    done = run([*CELERY, "inspect", "ping", "--timeout", "1"])
    assert done.returncode != 0
    assert MISSING_BROKER_URL in done.stderr + done.stdout
