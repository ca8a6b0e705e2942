"""Where a history may be cut: never between a tool call and its results."""

from __future__ import annotations

from tests.conversation.history import bot, call, result, system, user
from tulip_memory.conversation.turns import (
    cut_points,
    drop_leading_orphans,
    split_leading_system,
)


def test_every_boundary_of_plain_messages_is_a_cut_point() -> None:
    assert cut_points([]) == [0]
    assert cut_points([system(), user("u"), bot("a")]) == [0, 1, 2, 3]


def test_a_call_and_its_results_form_one_turn() -> None:
    history = [user("u"), call("a", "b"), result("a"), result("b"), bot("done")]
    assert cut_points(history) == [0, 1, 4, 5]


def test_a_result_far_from_its_call_holds_everything_between_together() -> None:
    history = [call("a"), system("note"), call("b"), result("b"), result("a"), user("u")]
    assert cut_points(history) == [0, 5, 6]


def test_a_result_without_its_call_does_not_hold_anything() -> None:
    history = [result("lost"), user("u"), call("a"), result("a")]
    assert cut_points(history) == [0, 1, 2, 4]
    assert drop_leading_orphans(history) == history[1:]


def test_only_the_leading_run_of_system_messages_is_split_off() -> None:
    history = [system("a"), system("b"), user("u"), system("note")]
    assert split_leading_system(history) == (history[:2], history[2:])
    assert split_leading_system([system("a")]) == ([history[0]], [])
