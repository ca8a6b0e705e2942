"""No module of ours imports itself back: the static import graph of `tulip_*` and `bench`
has no circle.

Function-level imports and imports under ``TYPE_CHECKING`` count (see tests/support/imports.py):
a late import that dodges a circle at run time still ties the two modules into one.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import Import, circles, graph, imports

#: Circles the code still has; each commit that breaks one takes it out of this list.
KNOWN: list[list[str]] = [
    [
        "tulip_workers.app",
        "tulip_workers.lease",
        "tulip_workers.parking",
        "tulip_workers.poolinfo",
        "tulip_workers.priority",
        "tulip_workers.readiness",
        "tulip_workers.redelivery",
        "tulip_workers.refusals",
        "tulip_workers.runtime",
    ],
]


def test_no_import_circle_among_our_modules() -> None:
    assert circles(graph(imports())) == KNOWN


def test_the_graph_sees_late_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "tulip_x"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from tulip_x import b\n")
    (package / "b.py").write_text("from . import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    found = imports(tmp_path)
    assert Import("tulip_x.a", "tulip_x.b", 2, top_level=False) in found
    assert Import("tulip_x.b", "tulip_x.c", 1, top_level=True) in found
    assert circles(graph(found)) == [["tulip_x.a", "tulip_x.b", "tulip_x.c"]]
