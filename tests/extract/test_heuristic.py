"""The offline extractor on natural chat: facts about the speaker, in the third person,
with stable keys, dates made absolute, and what it must not store.

Every sentence here was written for this test (none comes from a data set).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tulip_memory.extract import heuristic_extract
from tulip_memory.extract.clauses import clauses
from tulip_memory.extract.dates import resolve
from tulip_memory.extract.heuristic import extract_sentence, message_memories
from tulip_memory.extract.person import third_person
from tulip_memory.manager import MemoryType
from tulip_memory.messages import Message, Role

#: Monday 8 May 2023, 13:56 UTC: the time the corpus is said at.
SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()

# (what Maya says, [(key, content) she is remembered by]); the content is exact.
FACTS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Hi! I'm Maya, I just moved to Lisbon from Berlin last month.",
        [
            ("name", "The user's name is Maya."),
            ("home", "Maya just moved to Lisbon from Berlin in April 2023."),
        ],
    ),
    (
        "I only drink oat milk lattes, I'm lactose intolerant.",
        [
            ("diet-drink-oat-milk-lattes", "Maya only drinks oat milk lattes."),
            ("diet", "Maya is lactose intolerant."),
        ],
    ),
    (
        "I work at Initech now, not Globex any more.",
        [("employer", "Maya works at Initech now, not Globex any more.")],
    ),
    ("I don't work at Globex anymore.", [("employer", "Maya does not work at Globex anymore.")]),
    (
        "I'm a nurse at the children's hospital.",
        [("role", "Maya is a nurse at the children's hospital.")],
    ),
    ("I'm Portuguese.", [("nationality", "Maya is Portuguese.")]),
    ("I'm originally from Porto.", [("origin", "Maya is originally from Porto.")]),
    ("I'm single and not looking.", [("relationship-status", "Maya is single and not looking.")]),
    (
        "I have two kids and a dog named Rex.",
        [("has-kid", "Maya has two kids and a dog named Rex.")],
    ),
    ("My sister's name is Ana.", [("sister-name", "Maya's sister's name is Ana.")]),
    (
        "I need to renew my passport.",
        [("plan-renew-my-passport", "Maya needs to renew their passport.")],
    ),
    (
        "My partner's dad taught me to sail.",
        [("fact-partners-dad-taught-sail", "Maya's partner's dad taught them to sail.")],
    ),
    (
        "I hate running but I love swimming.",
        [
            ("preference-running", "Maya hates running."),
            ("preference-swimming", "Maya loves swimming."),
        ],
    ),
    ("I'm allergic to peanuts.", [("allergy-peanuts", "Maya is allergic to peanuts.")]),
    (
        "My favourite band is Radiohead.",
        [("favourite-band", "Maya's favourite band is Radiohead.")],
    ),
    (
        "I'm planning to visit Japan next year.",
        [("plan-visit-japan-next-year", "Maya is planning to visit Japan in 2024.")],
    ),
    (
        "Wow, yesterday I ran my first half marathon and it was brutal!",
        [
            (
                "fact-yesterday-ran-first-half-marathon",
                "On 7 May 2023 Maya ran their first half marathon.",
            )
        ],
    ),
    (
        "We went hiking in Sintra last Sunday.",
        [
            (
                "fact-went-hiking-sintra-last-sunday",
                "Maya and others went hiking in Sintra on the Sunday before 8 May 2023.",
            )
        ],
    ),
    (
        "Gonna start a pottery class next week.",
        [
            (
                "plan-start-pottery-class-next-week",
                "Maya is going to start a pottery class in the week after 8 May 2023.",
            )
        ],
    ),
    (
        "I think I'll repaint the kitchen in June.",
        [("plan-repaint-kitchen-in-june", "Maya will repaint the kitchen in June.")],
    ),
    (
        "My kids love building sandcastles.",
        [("fact-kids-love-building-sandcastles", "Maya's kids love building sandcastles.")],
    ),
    (
        "I'm so excited to start my new job on Monday!",
        [
            (
                "fact-excited-start-new-job-monday",
                "Maya is so excited to start their new job on Monday.",
            )
        ],
    ),
]

# What must not be stored: questions, greetings and thanks, advice and praise for the
# other party, feelings of the moment, opinions and platitudes, unnamed objects.
NON_FACTS = [
    "How was your weekend?",
    "Do you like my new haircut?",
    "Hey, good to see you!",
    "Thanks so much, that's really kind of you.",
    "You should try the pastel de nata!",
    "Try meditating before bed, it really helps.",
    "Your painting is gorgeous.",
    "I'm so happy for you.",
    "I love it!",
    "I know, right?",
    "I'm a bit tired today.",
    "I'm good, thanks.",
    "I can imagine how hard that was.",
    "We can make a difference together.",
    "That sounds like a lot of fun.",
    "It was so powerful.",
    "Let's catch up soon.",
    "Good luck with the exam!",
    "Bye for now!",
    "Haha yeah totally.",
]


@pytest.mark.parametrize(("text", "expected"), FACTS, ids=[t for t, _ in FACTS])
def test_natural_sentences_become_third_person_facts(
    text: str, expected: list[tuple[str, str]]
) -> None:
    found = [(m.key, m.content) for m in message_memories(text, "Maya", SAID)]
    assert found == expected
    assert all(m.type == MemoryType.USER for m in message_memories(text, "Maya", SAID))


@pytest.mark.parametrize("text", NON_FACTS)
def test_questions_greetings_and_advice_are_not_stored(text: str) -> None:
    assert message_memories(text, "Maya", SAID) == []


def test_without_a_name_or_a_time() -> None:
    (memory,) = message_memories("I went to Madrid yesterday.")
    assert memory.content == "The user went to Madrid yesterday."


@pytest.mark.parametrize(
    ("fact", "correction"),
    [
        ("My favourite colour is blue.", "Actually, my favourite colour is green."),
        ("I like pizza.", "Actually, I hate pizza."),
        ("I prefer tea over coffee.", "No, I prefer coffee to tea."),
        ("I am a nurse.", "Correction: I work as a surgeon."),
        ("I work at Globex.", "I don't work at Globex any more, I joined Initech."),
        ("I live in Berlin.", "Oh, I moved to Lisbon in March."),
        ("I'm married.", "We're divorced now, I'm single."),
        (
            "Remember that the API base is https://a.example",
            "Actually, the API base is https://b.example",
        ),
    ],
)
def test_a_correction_has_the_key_of_the_fact_it_corrects(fact: str, correction: str) -> None:
    first = heuristic_extract([Message(role=Role.USER, content=fact)])
    both = heuristic_extract(
        [Message(role=Role.USER, content=fact), Message(role=Role.USER, content=correction)]
    )
    assert len(first) == 1
    (kept,) = [m for m in both if (m.type, m.key) == (first[0].type, first[0].key)]
    assert kept.content != first[0].content  # the correction replaced it


@pytest.mark.parametrize(
    ("sentence", "kind", "key", "content"),
    [
        ("My name's Ana", "user", "name", "The user's name is Ana."),
        ("Our deadline is Friday.", "project", "deadline", "The user's deadline is Friday."),
        ("Remember that the deploy URL is https://deploy.example", "reference", "deploy-url", None),
        ("Please remember: the staging db is pg-stage-1", "project", "staging-db", None),
        (
            "Remember to always run the tests.",
            "feedback",
            "feedback-run-tests",
            "Always run the tests.",
        ),
        ("Remember that I'm left-handed", "user", "fact-left-handed", "The user is left-handed."),
        ("I prefer tea over coffee.", "user", "preference-coffee-vs-tea", None),
        ("I don't like olives.", "user", "preference-olives", "The user does not like olives."),
        ("I'm a big fan of jazz", "user", "preference-jazz", "The user is a fan of jazz."),
        ("I work as a nurse", "user", "role", "The user works as a nurse."),
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
    ["What is my favourite colour?", "Actually, it is Tuesday.", "Use tabs."],
)
def test_only_framed_sentences_state_facts_not_about_the_speaker(sentence: str) -> None:
    assert extract_sentence(sentence) is None


def test_a_conversation_reads_only_user_text_keeps_sources_and_the_latest_wins() -> None:
    when = datetime(2023, 5, 8, 9, 0, tzinfo=UTC)
    messages = [
        Message(role=Role.SYSTEM, content="My name is System."),
        Message(
            role=Role.USER,
            content="Hi! My favourite colour is blue. I work as a nurse.",
            metadata={"id": "m1", "timestamp": when.timestamp()},
        ),
        Message(role=Role.ASSISTANT, content="My name is Assistant. I like pizza."),
        Message(
            role=Role.USER,
            content="Actually, my favourite colour is green.\nThanks",
            metadata={"id": "m3"},
        ),
    ]
    memories = heuristic_extract(messages)
    assert [(m.type, m.key, m.content) for m in memories] == [
        (MemoryType.USER, "role", "The user works as a nurse."),
        (MemoryType.USER, "favourite-colour", "The user's favourite colour is green."),
    ]
    assert memories[0].metadata["source_ids"] == ["m1"]
    assert memories[0].metadata["observed_at"] == when.timestamp()
    assert memories[1].metadata["source_ids"] == ["m3"]
    assert heuristic_extract(messages) == memories  # deterministic


def test_clauses_split_at_new_subjects_only() -> None:
    assert clauses("Wow, I went there yesterday and it was great") == [
        "I went there yesterday",
        "it was great",
    ]
    assert clauses("I bought apples and pears, but I forgot the milk") == [
        "I bought apples and pears",
        "I forgot the milk",
    ]
    assert clauses("My husband and I are going camping") == ["My husband and I are going camping"]


def test_pronouns_of_the_speaker_become_the_speaker() -> None:
    said = "The support group made me feel accepted and gave me courage to be myself"
    assert third_person(said, "Maya") == (
        "The support group made Maya feel accepted and gave them courage to be themselves"
    )
    assert third_person("i really love hiking with my dog", "Maya") == (
        "Maya really loves hiking with their dog"
    )
    assert third_person("My husband and I are going camping", "Maya") == (
        "Maya's husband and Maya are going camping"
    )
    assert third_person("I've tried it and I watch it daily", None) == (
        "The user has tried it and the user watches it daily"
    )


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("yesterday", "on 7 May 2023"),
        ("last night", "on the night of 7 May 2023"),
        ("tomorrow", "on 9 May 2023"),
        ("last week", "in the week before 8 May 2023"),
        ("next month", "in June 2023"),
        ("last month", "in April 2023"),
        ("last year", "in 2022"),
        ("last Sunday", "on the Sunday before 8 May 2023"),
        ("two weeks ago", "two weeks before 8 May 2023"),
        ("in March", "in March"),
    ],
)
def test_relative_dates_are_made_absolute(text: str, resolved: str) -> None:
    assert resolve(text, SAID) == resolved
    assert resolve(text, None) == text
