"""The repository-root ``celeryconfig.py``: Celery's deployment convention
(``celery --config celeryconfig``) over ``tulip_wire.celeryconfig``, as the Procfile
and compose start every worker and Flower."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import celeryconfig
from tulip_wire import celeryconfig as wire

ROOT = Path(__file__).resolve().parent.parent


def test_the_root_module_is_every_setting_of_tulip_wire() -> None:
    importlib.reload(celeryconfig)  # another test may have reloaded tulip_wire's since
    settings = {k: v for k, v in vars(wire).items() if k.islower() and not k.startswith("_")}
    assert settings and {k: getattr(celeryconfig, k, None) for k in settings} == settings
    assert "celeryconfig" not in {p.name for p in (ROOT / "tulip_ops").iterdir()}


def test_celery_reads_the_deployment_directory_s_module(tmp_path: Path) -> None:
    """``--config celeryconfig`` loads the file of the directory Celery runs in, a
    deployment's own setting included (and without it, tulip_wire's alone)."""
    shutil.copy(ROOT / "celeryconfig.py", tmp_path)
    with (tmp_path / "celeryconfig.py").open("a") as f:
        f.write("worker_max_tasks_per_child = 777\n")
    command = [sys.executable, "-m", "celery", "-A", "tulip_workers.app"]
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    env["TULIP_BROKER_URL"] = "redis://127.0.0.1:1/0"  # required (none guessed); never dialled

    def report(*config: str) -> str:
        done = subprocess.run(
            [*command, *config, "report"], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "worker_max_tasks_per_child: 777" in report("--config", "celeryconfig")
    assert "worker_max_tasks_per_child: 777" not in report()


def test_the_procfile_and_compose_start_celery_with_it() -> None:
    procfile = dict(
        line.split(": ", 1)
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for role in ("extract", "checkpoint", "summarize", "reindex"):
        assert procfile[role].startswith(f"tulip-memory worker {role} ")
        assert procfile[role].endswith(" --config celeryconfig")
    assert "--config celeryconfig flower" in procfile["flower"]
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, service in services.items():
        command = service.get("command") or []
        if command[:1] == ["worker"]:
            assert command[-2:] == ["--config", "celeryconfig"], name
    assert services["flower"]["entrypoint"][3:5] == ["--config", "celeryconfig"]
    assert "COPY celeryconfig.py ./" in (ROOT / "Dockerfile").read_text()
