"""Deltas on the wire rebuild the state's exact bytes from their base: appends encode
only the tail when the items are known, and a change ``==`` cannot see (``1`` for
``1.0``, ``True`` for ``1``) is never dropped from a patch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tulip_memory.delta.codec import dumps
from tulip_memory.delta.diff import apply
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_wire.statedelta import advance, onto_known, snapshot


def rebuilt(base: dict[str, Any], data: dict[str, Any]) -> bytes:
    step = advance(snapshot(base), data)
    assert step.snapshot.digest == snapshot(data).digest
    out = data if step.patch is None else apply(snapshot(base).values, step.patch)
    return dumps(out)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (1, 1.0),
        (True, 1),
        (0.0, -0.0),
        ({"x": [1, {"y": 2}]}, {"x": [1, {"y": 2.0}]}),
    ],
)
def test_a_change_equal_under_eq_survives_every_path(old: Any, new: Any) -> None:
    long = [{"content": "w " * 200, "n": i} for i in range(40)]  # a large list field
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"m": long, "meta": {"v": old, "k": 1}}, {"m": long, "meta": {"v": new, "k": 2}}),
        ({"m": [{"v": old}, *long]}, {"m": [{"v": new}, *long, {"v": 3}]}),  # the full path
        ({"m": long, "big": [old] * 3000}, {"m": long, "big": [new] * 3000}),
    ]
    for base, data in cases:
        assert rebuilt(base, data) == dumps(data)


def test_known_items_are_trusted_only_when_they_are_the_bases_own() -> None:
    base = snapshot({"m": [{"a": i} for i in range(10)], "i": 1})
    items = base.values["m"]
    grown = advance(base, {"m": [*items, {"a": 10}], "i": 2}, {"m": len(items)})
    assert grown.patch == ["{", {"m": ["[", [[0, 10], {"+": [{"a": 10}]}]], "i": ["=", 2]}, []]
    copies = [dict(x) for x in items]
    copies[0] = {"a": 1.0}  # equal to base's but not its objects: encoded and checked
    step = advance(base, {"m": [*copies, {"a": 10}], "i": 2}, {"m": len(items)})
    assert step.patch is None or dumps(apply(base.values, step.patch)) == dumps(
        {"i": 2, "m": [*copies, {"a": 10}]}
    )
    assert step.snapshot.values["m"][0] == {"a": 1.0}


def test_a_tail_is_applied_onto_the_known_messages_themselves() -> None:
    """``onto_known`` keeps the base's Message objects and builds only the appended
    ones; any patch that is not a tail onto exactly those messages is left to the
    checked path (None)."""
    said = [Message(role=Role.USER, content=f"m{i}", metadata={"n": i}) for i in range(3)]
    old = AgentState(messages=tuple(said), iterations=3, metadata={"topic": "a"})
    new = AgentState(
        messages=(*said, Message(role=Role.ASSISTANT, content="ok")),
        iterations=4,
        metadata={"topic": "b"},
    )
    base = snapshot(old.to_checkpoint())
    step = advance(base, new.to_checkpoint(), {"messages": 0})
    assert step.patch is not None
    fields = {k: v for k, v in base.values.items() if k != "messages"}
    got = onto_known(old.messages, fields, step.patch)
    assert got == new
    assert got is not None and all(a is b for a, b in zip(got.messages, said, strict=False))
    assert onto_known(old.messages[:2], fields, step.patch) is None  # another base
    assert onto_known(old.messages, fields, ["=", new.to_checkpoint()]) is None
    edit = advance(base, replace(new, messages=(said[1], *new.messages[1:])).to_checkpoint())
    assert edit.patch is None or onto_known(old.messages, fields, edit.patch) is None
