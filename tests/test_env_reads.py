"""One parser per variable: every ``TULIP_*`` variable is declared once, as a
:class:`tulip_memory.env.Var`, and no module reads one from an environment mapping by
hand (``os.environ.get("TULIP_X")``, ``env["TULIP_X"]``, ``os.getenv``)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from tests.test_settings_table import NAME, PACKAGES, ROOT, names_in_code
from tulip_memory.config import StoreSettings
from tulip_memory.env import EMBED_DIM, Var, positive

DECLARERS = {"Var", "text_var"}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _callee(node: ast.Call) -> str:
    func = node.func.value if isinstance(node.func, ast.Subscript) else node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _tulip_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if NAME.fullmatch(node.value) else None
    return None


def declarations() -> Counter[str]:
    found: Counter[str] = Counter()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _callee(node) in DECLARERS and node.args:
                name = _tulip_name(node.args[0])
                if name:
                    found[name] += 1
    return found


def hand_reads() -> list[str]:
    """``x.get("TULIP_…")``, ``getenv("TULIP_…")`` and ``x["TULIP_…"]`` (a read, not a
    store) anywhere in the rooms."""
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Call) and _callee(node) in {"get", "getenv", "pop"}:
                name = _tulip_name(node.args[0]) if node.args else None
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                name = _tulip_name(node.slice)
            if name:
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)} {name}")
    return found


def test_every_variable_is_declared_exactly_once() -> None:
    declared = declarations()
    assert [name for name, n in declared.items() if n > 1] == []
    # What the code names but does not declare: the variables only the deployment
    # files (compose) and the dev stack's env file use.
    undeclared = names_in_code() - set(declared)
    assert sorted(undeclared) == [
        "TULIP_FLOWER_PASSWORD",
        "TULIP_FLOWER_URL",
        "TULIP_FLOWER_USER",
        "TULIP_HTTP_DEMO_KEY",
        "TULIP_HTTP_URL",
        "TULIP_METRICS_URL",
    ]


def test_no_variable_is_read_by_hand() -> None:
    assert hand_reads() == []


def test_a_variable_parses_once_and_names_itself_when_malformed() -> None:
    assert EMBED_DIM.read({}) is None and EMBED_DIM.read({"TULIP_EMBED_DIM": " "}) is None
    assert EMBED_DIM.read({"TULIP_EMBED_DIM": "48"}) == 48
    with pytest.raises(ValueError, match=r"^TULIP_EMBED_DIM must be an integer, got 'wide'$"):
        EMBED_DIM.read({"TULIP_EMBED_DIM": "wide"})
    with pytest.raises(ValueError) as e:
        Var("TULIP_X_KEY", 1, positive, secret=True).read({"TULIP_X_KEY": "s3cret"})
    assert str(e.value) == "TULIP_X_KEY must be an integer" and "s3cret" not in str(e.value)


def test_store_settings_from_the_environment() -> None:
    assert StoreSettings.from_env({}) == StoreSettings()
    s = StoreSettings.from_env(
        {
            "TULIP_DATABASE_URL": " postgresql://app:pw@db/tulip ",
            "TULIP_MEMORY_TABLE": "mem",
            "TULIP_EMBED_MODEL": "hashing:32",
            "TULIP_EMBED_ALLOWED": "openai/x=http://embed/v1",
        }
    )
    assert (s.require_database_url(), s.table) == ("postgresql://app:pw@db/tulip", "mem")
    assert (s.embed_model, s.embed_allowed) == ("hashing:32", "openai/x=http://embed/v1")
    assert "pw" not in repr(s)
    with pytest.raises(ValueError, match=r"^TULIP_DATABASE_URL is not set"):
        StoreSettings().require_database_url()
    with pytest.raises(ValueError, match="TULIP_EMBED_ALLOWED"):
        StoreSettings.from_env({"TULIP_EMBED_ALLOWED": "=http://embed/v1"})
