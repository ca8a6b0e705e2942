"""``SlidingWindowManager``, behaviour by behaviour as the SDK documents it."""

from __future__ import annotations

import pytest

from tests.conversation.history import (
    TASK,
    agent_loop,
    bot,
    call,
    chat,
    orphans,
    result,
    system,
    texts,
    unanswered,
    user,
)
from tests.support.events import EventLog
from tulip_memory.conversation import (
    ConversationConfigError,
    ConversationManager,
    NullManager,
    SlidingWindowManager,
)
from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Role

PRUNED = "memory.conversation.pruned"


def test_null_manager_returns_a_copy_of_everything() -> None:
    history = [system(), *chat(50)]
    kept = NullManager().apply(history)
    assert kept == history and kept is not history


async def test_null_manager_async_apply_delegates_to_apply() -> None:
    history = chat(3)
    assert await NullManager().async_apply(history) == history


def test_managers_share_the_contract() -> None:
    assert isinstance(NullManager(), ConversationManager)
    assert isinstance(SlidingWindowManager(), ConversationManager)
    with pytest.raises(TypeError):
        ConversationManager()  # type: ignore[abstract]


def test_defaults() -> None:
    manager = SlidingWindowManager()
    assert (manager.window_size, manager.slide_step) == (20, 1)
    assert manager.preserve_system and manager.preserve_first_user


@pytest.mark.parametrize(
    ("window_size", "slide_step", "message"),
    [
        (0, 1, "window_size must be at least 1"),
        (-3, 1, "window_size must be at least 1"),
        (5, 0, "slide_step must be between 1 and window_size"),
        (5, 6, "slide_step must be between 1 and window_size"),
    ],
)
def test_invalid_settings_are_refused(window_size: int, slide_step: int, message: str) -> None:
    with pytest.raises(ConversationConfigError, match=message) as refused:
        SlidingWindowManager(window_size=window_size, slide_step=slide_step)
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, TulipMemoryError)


def test_a_step_as_large_as_the_window_is_allowed() -> None:
    assert SlidingWindowManager(window_size=5, slide_step=5).slide_step == 5


def test_an_empty_history_stays_empty(events: EventLog) -> None:
    assert SlidingWindowManager().apply([]) == []
    assert events.events == []


def test_a_history_within_the_window_is_unchanged(events: EventLog) -> None:
    history = [system(), *chat(20)]
    kept = SlidingWindowManager(window_size=20).apply(history)
    assert kept == history and kept is not history
    assert events.named(PRUNED) == []


def test_an_all_system_history_is_kept_whole(events: EventLog) -> None:
    history = [system(f"rule {i}") for i in range(30)]
    assert SlidingWindowManager(window_size=5).apply(history) == history
    assert events.events == []


def test_an_all_system_history_is_windowed_when_system_is_not_preserved() -> None:
    history = [system(f"rule {i}") for i in range(30)]
    kept = SlidingWindowManager(window_size=5, preserve_system=False).apply(history)
    assert kept == history[-5:]


def test_the_last_window_size_messages_are_kept_after_the_system_prompt() -> None:
    history = [system(), *chat(30)]
    kept = SlidingWindowManager(window_size=4).apply(history)
    assert texts(kept) == ["You are a travel agent.", "u13", "a13", "u14", "a14"]


def test_every_leading_system_message_stays_at_the_front() -> None:
    memory = system("<memory>The user flies from Lisbon.</memory>")
    history = [system(), memory, *chat(30)]
    kept = SlidingWindowManager(window_size=4).apply(history)
    assert kept[:2] == [history[0], memory] and texts(kept[2:]) == ["u13", "a13", "u14", "a14"]


def test_a_system_note_added_mid_run_stays_where_it_was_written() -> None:
    note = system("Note: the user is now on mobile.")
    history = [system(), user("u0"), bot("a0"), user("u1"), note, bot("a1"), user("u2"), bot("a2")]
    kept = SlidingWindowManager(window_size=4).apply(history)
    assert kept == [history[0], note, *history[5:]]


def test_a_mid_run_system_note_leaves_with_the_turns_around_it() -> None:
    note = system("Note: the user is now on mobile.")
    history = [system(), user("u0"), bot("a0"), user("u1"), note, bot("a1"), user("u2"), bot("a2")]
    kept = SlidingWindowManager(window_size=3).apply(history)
    assert note not in kept and kept == [history[0], *history[5:]]


def test_without_preserve_system_the_system_prompt_slides_out_too() -> None:
    history = [system(), *chat(6)]
    kept = SlidingWindowManager(window_size=4, preserve_system=False).apply(history)
    assert texts(kept) == ["u1", "a1", "u2", "a2"]


def test_with_slide_step_1_the_oldest_message_goes_on_every_request() -> None:
    manager = SlidingWindowManager(window_size=10)
    starts = [texts(manager.apply(chat(n)))[0] for n in range(11, 15)]
    assert starts == ["a0", "u1", "a1", "u2"]


def test_the_window_slides_in_steps_and_its_start_holds_between_them() -> None:
    manager = SlidingWindowManager(window_size=10, slide_step=5)
    history = [system(), *chat(40)]
    starts = []
    for n in range(11, 41):
        kept = manager.apply(history[: n + 1])
        assert kept[0] is history[0]
        assert 10 - 5 + 1 <= len(kept) - 1 <= 10
        starts.append(kept[1])
    # 11..15 messages share one start, 16..20 the next, and so on.
    for group in range(6):
        assert len({id(m) for m in starts[group * 5 : group * 5 + 5]}) == 1
    assert len({id(m) for m in starts}) == 6


def test_a_full_window_with_a_large_step_drops_a_whole_step() -> None:
    kept = SlidingWindowManager(window_size=10, slide_step=5).apply(chat(11))
    assert kept == chat(11)[5:] and len(kept) == 10 - 5 + 1


def test_tool_results_orphaned_by_the_cut_are_dropped(events: EventLog) -> None:
    history = [
        system(),
        user(TASK),
        call("c1", "c2", "c3"),
        result("c1"),
        result("c2"),
        result("c3"),
        bot("Found three flights."),
        user("Book the cheapest."),
        bot("Booked."),
    ]
    # The raw cut lands inside the block of results: results of c2 and c3 would lead.
    kept = SlidingWindowManager(window_size=5).apply(history)
    assert texts(kept) == ["You are a travel agent.", "Found three flights.", *texts(history[7:])]
    assert orphans(kept) == []
    (pruned,) = events.named(PRUNED)
    assert pruned["removed_count"] == 5


def test_results_whose_call_survives_the_cut_are_kept() -> None:
    history = [
        user(TASK),
        bot("On it."),
        call("c1", "c2"),
        result("c1"),
        result("c2"),
        user("Thanks."),
        bot("ok"),
    ]
    kept = SlidingWindowManager(window_size=5).apply(history)
    assert kept == history[2:]
    assert unanswered(kept) == [] and orphans(kept) == []


def test_the_opening_request_is_reattached_when_no_user_turn_survives(
    events: EventLog,
) -> None:
    history = [system(), *agent_loop(10)]
    kept = SlidingWindowManager(window_size=5).apply(history)
    assert kept[:2] == history[:2] and kept[1].content == TASK
    assert texts(kept[2:]) == ["call:c8", "result:c8", "call:c9", "result:c9"]
    (pruned,) = events.named(PRUNED)
    assert pruned == {"strategy": "sliding_window", "window_size": 5, "removed_count": 16}


def test_a_full_window_drops_one_more_step_to_make_room_for_the_request(
    events: EventLog,
) -> None:
    history = [system(), *agent_loop(10)]
    # The raw window (c7 ... result c9) is full and has no orphan to trim: one more
    # step goes, which orphans result c7, which goes too.
    kept = SlidingWindowManager(window_size=6).apply(history)
    assert texts(kept[1:]) == [TASK, "call:c8", "result:c8", "call:c9", "result:c9"]
    assert len(kept) - 1 <= 6
    (pruned,) = events.named(PRUNED)
    assert pruned["removed_count"] == 21 - 5


def test_a_window_full_of_tool_traffic_keeps_the_task_stated_far_behind() -> None:
    history = [system(), *agent_loop(200)]
    for window in (1, 2, 3, 20, 21):
        for step in sorted({s for s in (1, 2, window) if s <= window}):
            kept = SlidingWindowManager(window_size=window, slide_step=step).apply(history)
            rest = kept[1:]
            assert rest[0].content == TASK, (window, step)
            assert len(rest) <= window
            assert orphans(rest) == [] and [m for m in rest if m.role == Role.USER] == [rest[0]]


def test_a_chat_is_left_alone() -> None:
    kept = SlidingWindowManager(window_size=5).apply([system(), *chat(30)])
    assert texts(kept[1:]) == ["a12", "u13", "a13", "u14", "a14"]
    assert "u0" not in texts(kept)


def test_any_surviving_user_turn_keeps_the_opening_request_out() -> None:
    history = [*agent_loop(10), user("Also check trains."), call("t1"), result("t1")]
    # The cut orphans result c9; the follow-up is a user turn, so the task stays out.
    kept = SlidingWindowManager(window_size=4).apply(history)
    assert texts(kept) == ["Also check trains.", "call:t1", "result:t1"]


def test_without_preserve_first_user_an_agent_loop_loses_its_task() -> None:
    kept = SlidingWindowManager(window_size=4, preserve_first_user=False).apply(agent_loop(10))
    assert texts(kept) == ["call:c8", "result:c8", "call:c9", "result:c9"]


def test_a_window_of_one_keeps_the_newest_message_when_it_is_a_user_turn() -> None:
    history = [system(), *chat(5)]
    assert texts(SlidingWindowManager(window_size=1).apply(history)) == [
        "You are a travel agent.",
        "u2",
    ]


def test_a_window_of_one_keeps_the_request_over_a_last_message_without_a_user_turn() -> None:
    for history in ([system(), *chat(4)], [system(), *agent_loop(3)]):
        kept = SlidingWindowManager(window_size=1).apply(history)
        assert kept == history[:2]


def test_the_removed_count_is_what_actually_went(events: EventLog) -> None:
    manager = SlidingWindowManager(window_size=4, slide_step=2)
    manager.apply([system(), *chat(5)])  # 5 > 4: a step of 2 goes
    manager.apply([system(), *agent_loop(6)])  # 13 messages: the task, call c5, result c5
    assert [e["removed_count"] for e in events.named(PRUNED)] == [2, 13 - 3]


def test_the_input_list_is_not_changed() -> None:
    history = [system(), *agent_loop(10)]
    before = list(history)
    SlidingWindowManager(window_size=3).apply(history)
    assert history == before


async def test_async_apply_matches_apply(events: EventLog) -> None:
    history = [system(), *agent_loop(10)]
    manager = SlidingWindowManager(window_size=5, slide_step=2)
    assert await manager.async_apply(history) == manager.apply(history)
    assert len(events.named(PRUNED)) == 2
