"""The rooms of docs/architecture.md hold: no package imports one its row does not allow."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(?P<room>tulip_\w+)` \|.*\| (?P<allowed>[^|]*) \|$")
PLUG = re.compile(
    r"^\| `(?P<group>tulip_[\w.]+)` \| `(?P<name>[\w-]+)` \| `(?P<target>tulip_\w+)` \|"
)


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


def declared_plugs() -> set[tuple[str, str, str]]:
    """(group, name, room) of each entry point we declare in a group one of our rooms reads."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    groups = declared["project"].get("entry-points", {})
    return {
        (group, name, target.split(".")[0])
        for group, points in groups.items()
        if group.startswith("tulip_")
        for name, target in points.items()
    }


def documented_plugs() -> set[tuple[str, str, str]]:
    lines = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    return {(m["group"], m["name"], m["target"]) for m in map(PLUG.match, lines) if m}


def test_every_edge_through_an_entry_point_is_in_the_table() -> None:
    """A room that loads an entry point reaches the room it names at run time, an edge no
    import shows: each such edge a row does not allow stands in the plugs table."""
    table = allowed_edges()
    hidden = {
        (group, name, target)
        for group, name, target in declared_plugs()
        if target not in table[group.split(".")[0]] | {group.split(".")[0]}
    }
    assert hidden == documented_plugs()
    assert ("tulip_memory.checkpointers", "queued", "tulip_producer") in hidden


def test_no_top_level_module_a_users_app_may_have() -> None:
    """The root ``celeryconfig.py`` is a deployment file (Celery's convention), never
    installed: only the ``tulip_*`` packages are."""
    for name in ("producer", "workers"):
        assert not (ROOT / name).exists(), name
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py-modules" not in setuptools
    assert all(p.startswith("tulip_") for p in setuptools["packages"]["find"]["include"])
