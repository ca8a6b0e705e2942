"""The rooms of docs/architecture.md hold: no package imports one its row does not allow."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(?P<room>tulip_\w+)` \|.*\| (?P<allowed>[^|]*) \|$")


def allowed_edges() -> dict[str, set[str]]:
    table: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            table[match["room"]] = set(re.findall(r"`(tulip_\w+)`", match["allowed"]))
    return table


def imported_rooms(path: Path, rooms: set[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found |= {name.split(".")[0] for name in names} & rooms
    return found


def forbidden_edges() -> list[str]:
    table = allowed_edges()
    edges = []
    for room, allowed in table.items():
        for path in sorted((ROOT / room).rglob("*.py")):
            for target in sorted(imported_rooms(path, set(table)) - allowed - {room}):
                edges.append(f"{path.relative_to(ROOT)} imports {target}")
    return edges


def test_the_table_names_every_package() -> None:
    packages = {p.parent.name for p in ROOT.glob("tulip_*/__init__.py")}
    assert packages == set(allowed_edges())


def test_no_forbidden_import_between_rooms() -> None:
    assert forbidden_edges() == []


def test_no_top_level_module_a_users_app_may_have() -> None:
    """The root ``celeryconfig.py`` is a deployment file (Celery's convention), never
    installed: only the ``tulip_*`` packages are."""
    for name in ("producer", "workers"):
        assert not (ROOT / name).exists(), name
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py-modules" not in setuptools
    assert all(p.startswith("tulip_") for p in setuptools["packages"]["find"]["include"])
