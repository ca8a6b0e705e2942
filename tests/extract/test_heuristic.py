"""The offline heuristic extractor: signals, stable keys, corrections."""

from __future__ import annotations

import pytest

from tulip_memory.extract import heuristic_extract
from tulip_memory.extract.heuristic import extract_sentence
from tulip_memory.manager import MemoryType
from tulip_memory.messages import Message, Role


@pytest.mark.parametrize(
    ("sentence", "kind", "key", "content"),
    [
        (
            "My favourite colour is blue.",
            "user",
            "favourite-colour",
            "The user's favourite colour is blue.",
        ),
        ("My name's Ana", "user", "name", "The user's name is Ana."),
        ("Our deadline is Friday.", "project", "deadline", "Our deadline is Friday."),
        ("Remember that the deploy URL is https://deploy.example", "reference", "deploy-url", None),
        ("Please remember: the staging db is pg-stage-1", "project", "staging-db", None),
        (
            "Remember to always run the tests.",
            "feedback",
            "feedback-run-tests",
            "Always run the tests.",
        ),
        ("Remember that I'm left-handed", "user", "note-im-left-handed", None),
        ("I prefer tea over coffee.", "user", "preference-coffee-vs-tea", None),
        ("I like pizza", "user", "preference-pizza", "The user likes pizza."),
        ("I don't like olives.", "user", "preference-olives", "The user does not like olives."),
        ("I hate meetings before 10", "user", "preference-meetings-before-10", None),
        ("I'm a big fan of jazz", "user", "preference-jazz", "The user is a fan of jazz."),
        ("I am a data scientist.", "user", "role", "The user is a data scientist."),
        ("I work as a nurse", "user", "role", "The user is a nurse."),
        ("I work at Acme Corp.", "user", "employer", "The user works at Acme Corp."),
    ],
)
def test_signals(sentence: str, kind: str, key: str, content: str | None) -> None:
    memory = extract_sentence(sentence)
    assert memory is not None
    assert (memory.type.value, memory.key) == (kind, key)
    if content is not None:
        assert memory.content == content
    assert memory.metadata["source"] == "heuristic"


@pytest.mark.parametrize(
    "sentence",
    [
        "What is my favourite colour?",
        "Hello there!",
        "I'm a bit tired today.",
        "Actually, it is Tuesday.",
        "Use tabs.",  # an instruction counts only when framed as explicit or a correction
    ],
)
def test_ordinary_sentences_are_not_memories(sentence: str) -> None:
    assert extract_sentence(sentence) is None


@pytest.mark.parametrize(
    ("fact", "correction"),
    [
        ("My favourite colour is blue.", "Actually, my favourite colour is green."),
        ("I like pizza.", "Actually, I hate pizza."),
        ("I prefer tea over coffee.", "No, I prefer coffee to tea."),
        ("I am a nurse.", "Correction: I work as a surgeon."),
        (
            "Remember that the API base is https://a.example",
            "Actually, the API base is https://b.example",
        ),
    ],
)
def test_a_correction_has_the_key_of_the_fact_it_corrects(fact: str, correction: str) -> None:
    first, second = extract_sentence(fact), extract_sentence(correction)
    assert first is not None and second is not None
    assert (first.type, first.key) == (second.type, second.key)
    assert first.content != second.content
    assert second.metadata["signal"] == "correction"


def test_conversation_only_user_text_and_the_latest_statement_wins() -> None:
    messages = [
        Message(role=Role.SYSTEM, content="My name is System."),
        Message(role=Role.USER, content="Hi! My favourite colour is blue. I work as a nurse."),
        Message(role=Role.ASSISTANT, content="My name is Assistant. I like pizza."),
        Message(role=Role.USER, content="Actually, my favourite colour is green.\nThanks"),
    ]
    memories = heuristic_extract(messages)
    assert [(m.type, m.key, m.content) for m in memories] == [
        (MemoryType.USER, "role", "The user is a nurse."),
        (MemoryType.USER, "favourite-colour", "The user's favourite colour is green."),
    ]
    assert heuristic_extract(messages) == memories  # deterministic
