"""docker-compose.yml and Procfile describe processes our CLI really runs.

Docker is not available where the suite runs, so the compose file is validated
structurally: its services, the commands they run (parsed by our own CLI parser),
its environment names (each documented in docs/configuration.md), health checks and order.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from tulip_ops.cli import _parser
from tulip_ops.dev.embedded import MIN_PGVECTOR, PG_MAJOR
from tulip_ops.dev.supervisor import POOLED, ROLES

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def test_backing_services_are_configured_for_durability() -> None:
    redis = SERVICES["redis"]
    assert redis["image"].startswith("redis:7")
    cmd = " ".join(redis["command"])
    assert "--appendonly yes" in cmd and "--maxmemory-policy noeviction" in cmd
    # The embedded server's PostgreSQL major and pgvector minor, pinned.
    major, minor = MIN_PGVECTOR
    tag = rf"pgvector/pgvector:{major}\.{minor}\.\d+-pg{PG_MAJOR}"
    assert re.fullmatch(tag, SERVICES["postgres"]["image"])
    assert "mc mb --ignore-existing local/tulip-checkpoints" in " ".join(
        SERVICES["minio-bucket"]["command"]
    )
    for name in ("redis", "postgres", "minio"):
        assert "healthcheck" in SERVICES[name], name


def test_every_tulip_command_parses_with_our_cli() -> None:
    parser = _parser()
    for name, service in SERVICES.items():
        if service.get("build") != "." or "command" not in service:
            continue
        args = parser.parse_args(service["command"])
        assert hasattr(args, "run"), name


def test_procfile_runs_every_role() -> None:
    text = (ROOT / "Procfile").read_text()
    for role in [*ROLES, *POOLED]:
        assert f"tulip-memory worker {role}" in text
        assert any(
            (svc.get("command") or [])[:2] == ["worker", role] for svc in SERVICES.values()
        ), role


def test_workers_start_after_their_dependencies_are_healthy() -> None:
    for name, service in SERVICES.items():
        if (service.get("command") or [None])[0] != "worker":
            continue
        deps = service["depends_on"]
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
        assert service["stop_grace_period"]  # warm shutdown time for the task in hand


def test_flower_requires_auth_and_binds_to_loopback_on_the_host() -> None:
    flower = SERVICES["flower"]
    auth = flower["environment"]["FLOWER_BASIC_AUTH"]
    assert auth.startswith("${TULIP_FLOWER_USER:?") and ":${TULIP_FLOWER_PASSWORD:?" in auth
    assert all(p.startswith("127.0.0.1:") for p in flower["ports"])


def _argv_of(service: dict[str, Any]) -> str:
    health = (service.get("healthcheck") or {}).get("test") or []
    parts = [*(service.get("entrypoint") or []), *(service.get("command") or []), *health[1:]]
    return " ".join(parts)


def test_no_secret_is_ever_a_process_argument() -> None:
    """argv is world-readable (/proc/<pid>/cmdline, from the host too): passwords and
    keys travel by environment, stdin or a file the shell writes."""
    secrets = re.compile(r"PASSWORD|SECRET|SIGNING|basic-auth")
    builtin = re.compile(r"printf\s+'[^']*'\s+\"[^\"]*\"")  # the shell's own, never argv
    for name, service in SERVICES.items():
        argv = builtin.sub("", _argv_of(service).replace("$$", "$"))
        for word in shlex.split(argv):
            if re.match(r"[A-Z_]+=", word):
                continue  # an assignment: the program's environment, not its argv
            if word.startswith("--") or "$" in word:
                assert not secrets.search(word), (name, word)
    procfile = (ROOT / "Procfile").read_text()
    assert "--basic-auth" not in procfile and "FLOWER_BASIC_AUTH=" in procfile


def test_redis_needs_a_password_and_workers_are_not_minio_root() -> None:
    env = COMPOSE["x-tulip-env"]
    assert env["TULIP_BROKER_URL"].startswith("redis://:${REDIS_PASSWORD")
    assert env["TULIP_REDIS_URL"].startswith("redis://:${REDIS_PASSWORD")
    assert "requirepass" in _argv_of(SERVICES["redis"])
    assert "REDISCLI_AUTH" in " ".join(SERVICES["redis"]["healthcheck"]["test"])
    assert "MINIO_ROOT" not in env["AWS_ACCESS_KEY_ID"] + env["AWS_SECRET_ACCESS_KEY"]
    assert "mc admin user add" in _argv_of(SERVICES["minio-bucket"])


def test_images_are_pinned() -> None:
    for name, service in SERVICES.items():
        if "image" in service:
            repo, _, tag = service["image"].rpartition(":")
            assert repo and tag and tag != "latest" and any(c.isdigit() for c in tag), name
            assert re.search(r"\d+\.\d+|RELEASE\.\d{4}", tag), name


def test_environment_names_are_documented() -> None:
    readme = (ROOT / "docs" / "configuration.md").read_text()
    names = set(re.findall(r"\bTULIP_[A-Z0-9_]+", (ROOT / "docker-compose.yml").read_text()))
    names |= set(re.findall(r"\bTULIP_[A-Z0-9_]+", (ROOT / "Procfile").read_text()))
    missing = sorted(n for n in names if f"`{n}`" not in readme)
    assert not missing, f"undocumented in docs/configuration.md: {missing}"


def test_procfile_commands_exist() -> None:
    """Each command parses and is one the venv installs (the Procfile's comment says
    to put the venv on PATH)."""
    parser = _parser()
    venv_bin = Path(sys.executable).parent
    assert "PATH=" in (ROOT / "Procfile").read_text()
    for line in (ROOT / "Procfile").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        _, command = line.split(":", 1)
        argv = shlex.split(command)
        while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):  # environment assignments
            argv = argv[1:]
        assert (venv_bin / argv[0]).exists(), argv[0]
        if argv[0] == "tulip-memory":
            assert hasattr(parser.parse_args(argv[1:]), "run")
        else:
            assert argv[:6] == [
                "celery", "-A", "tulip_workers.app", "--config", "celeryconfig", "flower"
            ]  # fmt: skip


def test_redis_memory_is_bounded_and_never_evicts() -> None:
    cmd = SERVICES["redis"]["command"]
    assert cmd[cmd.index("--maxmemory") + 1] and cmd[cmd.index("--maxmemory-policy") + 1] == (
        "noeviction"
    )


def test_long_running_tulip_services_have_healthchecks() -> None:
    for name, service in SERVICES.items():
        if service.get("build") == "." and name != "migrate":
            test = service["healthcheck"]["test"]
            assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


#: The deployment settings module every worker service starts with (root celeryconfig.py).
CONFIG = ["--config", "celeryconfig"]


def test_ordered_services_claim_their_shards() -> None:
    """Shard workers scale as pool members (their leases keep one consumer per shard),
    never as fixed shard lists that a second replica would consume twice."""
    ordered = [
        service["command"]
        for service in SERVICES.values()
        if (service.get("command") or [])[:1] == ["worker"] and service["command"][1] in ROLES
    ]
    assert sorted(c[1] for c in ordered) == sorted(ROLES)
    assert all(c[2:] == ["--claim", *CONFIG] for c in ordered), ordered
    procfile = (ROOT / "Procfile").read_text()
    for role in ROLES:
        assert f"{role}: tulip-memory worker {role} --claim {' '.join(CONFIG)}\n" in procfile


def test_env_example_lists_every_variable_compose_reads() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)", text))
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert used - set(example) == set(), "missing from .env.example"
    required = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*):\?", text))
    assert all(example[name] for name in required), "a required variable left empty"
