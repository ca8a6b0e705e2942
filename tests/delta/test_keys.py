"""Thread ids become safe, spread, reversible keys, whatever the id."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_memory.delta import InvalidThreadIdError
from tulip_memory.delta.keys import (
    MAX_SEGMENT,
    ThreadKeys,
    head_key_thread,
    is_segment,
    segment,
    unescape,
)

HOSTILE = [
    "../../etc/passwd",
    "..",
    ".",
    "/",
    "a/b/../c",
    "C:\\Windows\\system32",
    "ticket-8912-refund",
    "Ticket-8912-Refund",
    "spaces and\ttabs\nnewlines",
    "nul\x00byte",
    "émoji 🧵 thread — ünïcode",
    "lone \ud800 surrogate",
    "%2e%2e%2f",
    "._0123456789abcdef0123456789abcdef",
    "x" * 512,
    "🧵" * 512,
]


@pytest.mark.parametrize("thread_id", HOSTILE)
def test_hostile_ids_become_plain_safe_segments(thread_id: str) -> None:
    keys = ThreadKeys.of(thread_id)
    seg = keys.part.split("/")[1]
    assert is_segment(seg) and seg not in (".", "..") and "/" not in seg
    assert seg.isascii() and len(seg) <= max(MAX_SEGMENT, 34)
    assert keys.head.startswith("heads/") and keys.log_prefix.startswith("log/")
    assert len(keys.log("3/000000000000-000000000215-abcdef01")) < 300
    tid, name_key = head_key_thread(keys.head)
    assert tid == thread_id or (tid is None and name_key == keys.name)


def test_ids_differing_only_in_case_get_different_segments() -> None:
    assert segment("Thread") != segment("thread")
    assert segment("Thread").lower() != segment("thread")


def test_long_ids_are_hashed_and_named() -> None:
    keys = ThreadKeys.of("x" * 512)
    assert keys.name is not None and keys.name.startswith("names/")
    assert ThreadKeys.of("short").name is None


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_escape_is_reversible(thread_id: str) -> None:
    seg = segment(thread_id)
    assert is_segment(seg)
    if not seg.startswith("._"):
        assert unescape(seg) == thread_id


@pytest.mark.parametrize("bad", ["", None, 42, b"bytes", "x" * 70000])
def test_invalid_thread_ids_are_refused(bad: object) -> None:
    with pytest.raises(InvalidThreadIdError):
        ThreadKeys.of(bad)  # type: ignore[arg-type]


def test_keys_spread_over_prefixes() -> None:
    spreads = {ThreadKeys.of(f"thread-{i}").part.split("/")[0] for i in range(2000)}
    assert len(spreads) > 200


def test_other_keys_are_not_heads() -> None:
    assert head_key_thread("log/ab/x/1/000-001-ff") == (None, None)
    assert head_key_thread("heads/zz/x") == (None, None)
    assert head_key_thread("heads/ab/../x") == (None, None)
