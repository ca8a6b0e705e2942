"""What Celery and Flower show of a dead letter: the redacted reason, the attempts it
took, where, which event of which tenant, and how to read the full reason."""

from __future__ import annotations

from tulip_workers.outcomes import dead_letter_summary


def test_the_summary_says_how_many_attempts_and_never_the_reason_s_text() -> None:
    reason = "ValueError: the user said 'my PIN is 4321'"
    summary = dead_letter_summary(
        reason, event_id="e" * 32, key="acme\x1fusers\x1fmaya", where="memory.extract.1",
        attempts=4,
    )  # fmt: skip
    assert " after 4 attempts on memory.extract.1: event " in summary
    assert "of tenant 'acme'" in summary and "4321" not in summary and "maya" not in summary
    assert summary.endswith(f"tulip-memory dlq show {'e' * 32} --tenant acme")
    one = dead_letter_summary(reason, event_id="e" * 32, key=None, where=None, attempts=1)
    assert " after 1 attempt on a worker" in one
