"""constraints.txt: the dependency set CI tests and the image installs, pinned.

Every dependency pyproject declares (the runtime set and the ``embedded``, ``server``,
``docs`` and ``dev`` extras) has exactly one pin, the pin is inside the declared range,
and neither the range nor the pin admits a withdrawn release (litellm 1.82.7 and 1.82.8 were
published compromised and pulled)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CHECKED_EXTRAS = ("embedded", "server", "docs", "dev")
WITHDRAWN = {"litellm": ["1.82.7", "1.82.8"]}


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"not an exact pin: {raw!r}"
        key = canonicalize_name(name)
        assert key not in found, f"pinned twice: {name}"
        found[key] = Version(version)
    return found


def declared() -> list[Requirement]:
    """Every requirement of the runtime set and the checked extras; an extra naming
    another of ours (``tulip-memory[server]``) is that extra's, checked there."""
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in CHECKED_EXTRAS:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return [r for r in reqs if canonicalize_name(r.name) != canonicalize_name(PROJECT["name"])]


@pytest.mark.parametrize("req", declared(), ids=str)
def test_every_declared_dependency_is_pinned_inside_its_range(req: Requirement) -> None:
    pinned = pins().get(canonicalize_name(req.name))
    assert pinned is not None, f"{req.name} has no pin in constraints.txt"
    assert req.specifier.contains(pinned, prereleases=True), f"{req.name}=={pinned} not in {req}"


@pytest.mark.parametrize("name", sorted(WITHDRAWN))
def test_withdrawn_releases_are_neither_admitted_nor_pinned(name: str) -> None:
    [req] = [r for r in declared() if canonicalize_name(r.name) == name]
    for bad in WITHDRAWN[name]:
        assert not req.specifier.contains(bad, prereleases=True), f"{req} admits {bad}"
        assert pins()[name] != Version(bad)
    assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), f"{req}: no bound"


def test_the_image_installs_the_pins_before_copying_the_code() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    deps = next(i for i, ln in enumerate(lines) if "constraints.txt ./" in ln)
    install = next(i for i, ln in enumerate(lines) if "-c constraints.txt" in ln)
    code = next(i for i, ln in enumerate(lines) if ln.startswith("COPY tulip_"))
    assert deps < install < code
    assert "pyproject.toml" in lines[deps] and "COPY . " not in "\n".join(lines)
    assert any("--no-deps" in ln for ln in lines[code:])
