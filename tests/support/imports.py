"""The static import graph of our packages: every module of `tulip_*` and `bench`, every
import in it.

Read from the source with `ast`, nothing imported: an `import` inside a function counts as much
as one at the top, since a circle dodged by a late import is still a circle. An import of a
name from a package points at the submodule when the name is one, else at the package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    top_level: bool


def modules(root: Path = ROOT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    packages = [*root.glob("tulip_*/__init__.py"), *root.glob("bench/__init__.py")]
    for package in sorted(packages):
        for path in sorted(package.parent.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(module, path, node)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield sub if sub in known else base


def _deepest_known(name: str, known: dict[str, Path]) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _walk(tree: ast.Module) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, with whether it runs when the module is imported (not in a function)."""
    stack: list[tuple[ast.AST, bool]] = [(tree, True)]
    while stack:
        node, top = stack.pop()
        yield node, top
        inner = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def imports(root: Path = ROOT) -> list[Import]:
    known = modules(root)
    found: list[Import] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, top in _walk(tree):
            for name in _targets(module, path, node, known):
                target = _deepest_known(name, known)
                if target is not None and target != module:
                    lineno = getattr(node, "lineno", 0)
                    found.append(Import(module, target, lineno, top))
    return sorted(found, key=lambda i: (i.source, i.line, i.target))


def graph(edges: list[Import]) -> dict[str, set[str]]:
    table: dict[str, set[str]] = {}
    for edge in edges:
        table.setdefault(edge.source, set()).add(edge.target)
    return table


def circles(table: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(table.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(table):
        if node not in index:
            visit(node)
    return sorted(found)
