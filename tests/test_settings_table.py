"""Every TULIP_* variable the code reads is in the Configuration table (docs/configuration.md), and
every variable the table documents is one the code or the deployment files know: the
table cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "tulip_memory",
    "tulip_wire",
    "tulip_producer",
    "tulip_workers",
    "tulip_service",
    "tulip_ops",
)
DEPLOYMENT = ("docker-compose.yml", "Procfile", "Dockerfile", ".env.example")
NAME = re.compile(r"\bTULIP_[A-Z0-9_]*[A-Z0-9]\b")


def names_in_code() -> set[str]:
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found |= set(NAME.findall(path.read_text(encoding="utf-8")))
    return found


def names_in_deployment() -> set[str]:
    found: set[str] = set()
    for name in DEPLOYMENT:
        path = ROOT / name
        if path.exists():
            found |= set(NAME.findall(path.read_text(encoding="utf-8")))
    return found


def names_in_table() -> set[str]:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = page.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `TULIP_")]
    return {name for row in rows for name in NAME.findall(row.split(" | ", 1)[0])}


def test_every_variable_the_code_reads_is_documented() -> None:
    assert sorted(names_in_code() - names_in_table()) == []


def test_every_documented_variable_is_known_to_the_code_or_the_deployment() -> None:
    assert sorted(names_in_table() - names_in_code() - names_in_deployment()) == []
