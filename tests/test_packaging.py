"""The package lives beside a user's Celery app: it never imports a top-level module the
app may have too (Celery's documented ``celeryconfig.py`` above all), and every package
it ships is typed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.producer.queues import with_db

PACKAGES = {
    "tulip_memory",
    "tulip_wire",
    "tulip_producer",
    "tulip_workers",
    "tulip_service",
    "tulip_ops",
}

#: A user's own ``celeryconfig.py``: importing it leaves a mark.
USER_CELERYCONFIG = """\
from pathlib import Path

Path(__file__).with_name("imported.mark").write_text("imported")
broker_url = "memory://"
"""


@pytest.fixture
def user_app(tmp_path: Path) -> Path:
    """A fresh working directory holding the user's ``celeryconfig.py``."""
    (tmp_path / "celeryconfig.py").write_text(USER_CELERYCONFIG)
    return tmp_path


def test_the_distribution_ships_only_our_packages_each_typed() -> None:
    dist = importlib.metadata.distribution("tulip-memory")
    top = set((dist.read_text("top_level.txt") or "").split())
    assert top == PACKAGES, f"top-level modules besides ours: {top - PACKAGES}"
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        assert (Path(spec.origin).parent / "py.typed").exists(), name


def test_a_user_celeryconfig_is_not_imported_by_the_library(user_app: Path) -> None:
    code = (
        "import sys\n"
        "from tulip_producer import Producer, Reader, QueuedMemoryManager\n"
        "import tulip_workers.app, tulip_ops.cli\n"
        "assert 'celeryconfig' not in sys.modules, sys.modules['celeryconfig']\n"
        "print(Producer.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=user_app, capture_output=True, text=True, check=False, timeout=120,
        env=_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tulip_producer.producer"
    assert not (user_app / "imported.mark").exists()


def test_worker_starts_beside_a_user_celeryconfig(
    user_app: Path, redis_url: str, worker_db: dict[str, str]
) -> None:
    broker = with_db(redis_url, 13)
    logs = user_app / "logs"
    env = _env(TULIP_BROKER_URL=broker, TULIP_EXTRACT_SHARDS="1", **worker_db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tulip_ops.cli", "worker", "extract", "--log-dir", str(logs)],
        cwd=user_app, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log = logs / "extract-0.log"
    try:
        deadline = time.monotonic() + 90
        while " ready." not in _read(log):
            assert proc.poll() is None, _read(log)
            assert time.monotonic() < deadline, _read(log)
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(60)
    assert "memory.extract.0" in _read(log)
    assert not (user_app / "imported.mark").exists()


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without ``PYTHONPATH`` (only the working directory and
    the installed packages are importable, as for a user's app)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


pytestmark = pytest.mark.timeout(180)
