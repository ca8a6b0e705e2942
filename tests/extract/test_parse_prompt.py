"""Pure pieces of the LLM extractor: parsing, validation, prompt, budget, retry policy."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tulip_memory.extract.parse import (
    MAX_CONTENT_CHARS,
    MAX_EMBEDDED_ATTEMPTS,
    MAX_OUTPUT_CHARS,
    normalize_key,
    parse_items,
    validate_item,
    validate_items,
)
from tulip_memory.extract.prompt import (
    OMITTED,
    build_prompt,
    memory_schema,
    render_transcript,
    trim_transcript,
)
from tulip_memory.manager import Memory, MemoryType
from tulip_memory.messages import Message, Role
from tulip_memory.model_calls import backoff_delay, estimate_tokens, parse_retry_after

ITEM = {"type": "user", "key": "name", "content": "The user is Ana."}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps([ITEM]),
        json.dumps({"memories": [ITEM]}),
        f"```json\n{json.dumps({'memories': [ITEM]})}\n```",
        f"Sure! Here you go:\n```\n{json.dumps([ITEM])}\n```\nAnything else?",
        f"I found one memory [1]: {json.dumps([ITEM])} - hope that helps.",
        f"Result: {json.dumps({'memories': [ITEM]})}",
    ],
)
def test_items_are_found_in_fences_and_prose(text: str) -> None:
    parsed = parse_items(text)
    assert parsed.error is None
    assert parsed.items == (ITEM,)


def test_unparseable_output_is_an_error_and_an_empty_list_is_not() -> None:
    assert parse_items("I could not find anything worth remembering.").error is not None
    assert parse_items('{"answer": 42}').error is not None
    assert parse_items("[]") == parse_items('{"memories": []}')
    assert parse_items("[]").error is None and parse_items("[]").items == ()


def test_output_over_the_bound_is_an_error_unread() -> None:
    item = json.dumps([{"type": "user", "key": "k", "content": "c"}])
    parsed = parse_items(item + " " * MAX_OUTPUT_CHARS)
    assert parsed.items == () and parsed.error is not None and "not read" in parsed.error
    assert parse_items(item + " " * (MAX_OUTPUT_CHARS - len(item))).items != ()


def test_prose_is_tried_at_its_first_brackets_only() -> None:
    """Each failed start costs a scan of the text before it: a reply of brackets that
    never decode is tried at a bounded number of them (then it is no answer)."""
    item = json.dumps([{"type": "user", "key": "k", "content": "c"}])
    near = "{x " * (MAX_EMBEDDED_ATTEMPTS - 1) + item
    far = "{x " * MAX_EMBEDDED_ATTEMPTS + item
    assert len(parse_items("said: " + near).items) == 1
    assert parse_items("said: " + far).error is not None


def test_items_are_validated_one_by_one() -> None:
    items = [
        ITEM,
        "just a string",
        {"type": "opinion", "key": "k", "content": "c"},
        {"type": "user", "key": "  ", "content": "c"},
        {"type": "user", "key": "k"},
        {"type": "user", "key": "k", "content": "x" * 5000},
        {"type": "FEEDBACK", "key": "Reply Style!", "content": " Be brief. ", "confidence": 2},
    ]
    memories, dropped = validate_items(items)
    assert memories == [
        Memory(type=MemoryType.USER, key="name", content="The user is Ana."),
        Memory(
            type=MemoryType.FEEDBACK,
            key="reply-style",
            content="Be brief.",
            metadata={"confidence": 1.0},
        ),
    ]
    assert [d.reason.split()[0] for d in dropped] == [
        "not",
        "unknown",
        "missing",
        "missing",
        "content",
    ]
    low = {**ITEM, "confidence": 0.2}
    assert isinstance(validate_item(low, min_confidence=0.5), str)


def test_text_postgres_cannot_store_drops_the_item_or_its_optional_field() -> None:
    for bad in ("\x00", "\ud800", "\udfff"):
        reason = validate_item({**ITEM, "content": f"The user is{bad} Ana."})
        assert isinstance(reason, str) and reason.startswith("content holds a NUL")
        memory = validate_item(
            {**ITEM, "why": bad, "how_to_apply": f"a{bad}", "sources": ["m1", f"m{bad}"]}
        )
        assert isinstance(memory, Memory)
        assert memory.metadata == {"source_ids": ["m1"]}


def test_fields_other_than_a_memorys_are_ignored() -> None:
    item = {
        **ITEM,
        "why": "She said so.",
        "how_to_apply": "Greet her by name.",
        "namespace": ["other-tenant", "users", "x"],
        "tenant": "other-tenant",
        "metadata": {"namespace": "evil"},
    }
    memory = validate_item(item)
    assert isinstance(memory, Memory)
    assert memory.metadata == {"why": "She said so.", "how_to_apply": "Greet her by name."}


def test_keys_are_normalised() -> None:
    assert normalize_key(" Favourite Colour ") == "favourite-colour"
    assert normalize_key("user/../../etc") == "user-etc"
    assert normalize_key("a" * 500) == "a" * 120
    assert normalize_key(42) == ""


def test_transcript_keeps_the_most_recent_lines_within_budget() -> None:
    words = len  # a "token" per character keeps the arithmetic obvious
    lines = ["a" * 10, "b" * 10, "c" * 10]
    assert trim_transcript(lines, 100, words) == lines
    assert trim_transcript(lines, 25, words) == [OMITTED, "b" * 10, "c" * 10]
    cut = trim_transcript(["x" * 100], 30, words)
    assert cut[0] == OMITTED and 0 < len(cut[1]) <= 30
    assert trim_transcript([], 10, words) == []


def test_transcript_and_prompt() -> None:
    messages = [
        Message(role=Role.SYSTEM, content="secret system prompt"),
        Message(role=Role.USER, content="My name is Ana."),
        Message(role=Role.ASSISTANT, content=""),
        Message(role=Role.TOOL, content="y" * 5000, name="lookup", tool_call_id="c1"),
    ]
    lines = render_transcript(messages)
    assert lines[0] == "User: My name is Ana."
    assert lines[1].startswith("Tool result lookup: ") and len(lines[1]) < 1100
    known = [Memory(type=MemoryType.USER, key="name", content="The user is Bo.")]
    system, user = build_prompt(lines, known)
    assert system["role"] == "system" and "JSON" in system["content"]
    assert '"key": "name"' in user["content"] and "My name is Ana." in user["content"]
    assert "secret system prompt" not in user["content"]
    schema = memory_schema()
    assert schema["properties"]["memories"]["items"]["additionalProperties"] is False


def test_retry_after_and_backoff() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 01 Jan 2025 12:00:05 GMT"}, now=now) == 5.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
    assert backoff_delay(1, 0.5, 30, 1.0) == 0.5
    assert backoff_delay(3, 0.5, 30, 0.0) == 1.0
    assert backoff_delay(20, 0.5, 30, 1.0) == 30
    assert estimate_tokens("abcd" * 10) == 11


def test_an_unusable_field_or_item_is_dropped_alone_and_no_reason_quotes_it() -> None:
    """A 400-digit confidence (``float()`` overflows) drops that field, a 100,000-character
    ``why`` too; the items stay. An item that fails any other way is dropped alone."""
    secret = "my SSN is 078-05-1120"
    items = [
        {**ITEM, "key": "a", "confidence": 10**400},
        {**ITEM, "key": "b", "why": secret * 5000, "how_to_apply": "Greet her."},
        {"type": secret, "key": "c", "content": "x"},
        {**ITEM, "key": secret * 10},  # a key is cut to its first 120 characters
    ]
    memories, dropped = validate_items(items)
    assert [m.key for m in memories] == ["a", "b", normalize_key(secret * 10)]
    assert "confidence" not in memories[0].metadata
    assert memories[1].metadata == {"how_to_apply": "Greet her."}
    assert all(len(m.key) <= 120 for m in memories)
    assert [(d.field, d.reason) for d in dropped] == [
        ("confidence", "confidence: a number too large for a float"),
        ("why", f"why: longer than {MAX_CONTENT_CHARS} characters"),
        (None, f"unknown type (a str of length {len(secret)})"),
    ]
    assert not any("SSN" in d.reason for d in dropped)


def test_an_answer_with_no_list_says_so_with_its_start() -> None:
    """For the tenant's dead letter only: every log line and Flower get its class,
    length and hash (tests/pipeline/test_private_failures.py)."""
    parsed = parse_items("no JSON here, " * 30)
    assert parsed.error is not None
    assert parsed.error.startswith("no JSON list of memories in the model output (420 characters)")
    assert len(parsed.error) < 300
