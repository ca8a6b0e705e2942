"""The Redis Lua scripts of a package: each is a file in the ``lua/`` directory beside
the module that runs it (``tulip_wire/lua``, ``tulip_workers/lua``), read once at import."""

from __future__ import annotations

from pathlib import Path


def lua(module_file: str, name: str) -> str:
    """The script ``name`` of the ``lua/`` directory beside ``module_file`` (a module's
    ``__file__``)."""
    return (Path(module_file).parent / "lua" / name).read_text(encoding="utf-8")
