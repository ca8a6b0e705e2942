"""Which namespaces get graphs of their own (``Graphs.select``): the biggest of each
table under its share limit, within the table's and the tenant's caps, each keeping its
graph down to half the threshold."""

from __future__ import annotations

from typing import Any

import pytest

from tulip_memory.reindex.graphs import Graphs
from tulip_memory.store import PgMemory


def _graphs(**caps: Any) -> Graphs:
    store = PgMemory("postgresql://nobody@localhost/none", table="t", dim=8)
    return Graphs(store, "postgresql://nobody@localhost/none", **caps)


def _row(kind: str, tenant: str, ns: str, rows: int, share: float = 0.01) -> dict[str, Any]:
    return {"kind": kind, "tenant": tenant, "ns": ns, "rows": rows, "share": share}


def _picked(
    graphs: Graphs, rows: list[dict[str, Any]], graphed: frozenset[Any] = frozenset()
) -> list[str]:
    return [f"{r['kind']}:{r['ns']}" for r in graphs.select(rows, graphed)]


def test_the_biggest_under_the_share_limit_within_the_table_cap() -> None:
    rows = [
        _row("memories", "a", "huge", 900_000, share=0.9),  # its table's graph is its own
        _row("memories", "a", "big", 50_000),
        _row("memories", "b", "mid", 20_000),
        _row("memories", "c", "edge", 12_000),
        _row("turns", "a", "turns", 40_000),
        _row("memories", "d", "small", 9_000),  # under min_rows, no graph yet
    ]
    graphs = _graphs(most=2, min_rows=10_000)
    assert _picked(graphs, rows) == ["memories:big", "memories:mid", "turns:turns"]


def test_a_graph_is_kept_down_to_half_the_threshold() -> None:
    rows = [_row("memories", "a", "shrunk", 6_000), _row("memories", "b", "new", 6_000)]
    graphs = _graphs(min_rows=10_000)
    assert _picked(graphs, rows, frozenset({("memories", "a", "shrunk")})) == ["memories:shrunk"]


def test_one_tenant_takes_at_most_its_share_of_a_tables_graphs() -> None:
    hog = [_row("memories", "hog", f"n{i}", 100_000 - i) for i in range(6)]
    rows = [*hog, _row("memories", "other", "x", 20_000)]
    picked = _picked(_graphs(most=4, per_tenant=2), rows)
    assert picked == ["memories:n0", "memories:n1", "memories:x"]


@pytest.mark.parametrize("caps", [{"most": -1}, {"per_tenant": -1}, {"min_rows": 0}])
def test_caps_are_checked(caps: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        _graphs(**caps)
