"""Sentences and clauses of chat text, and which clauses may state a fact.

A message is cut into sentences, a sentence into clauses at ``;``, dashes, "but",
"because", "so" and at "and"/commas followed by a new subject ("I went there
yesterday and it was great" is two clauses). Leading interjections ("Wow,", "Yeah
so") are dropped. A clause may state a fact about the speaker when it speaks of the
speaker (first person), is not a question, does not speak to the other party
(second person: advice, thanks, praise), and says something beyond pronouns,
feelings and filler ("I love it", "I'm so happy", "I know, right"; a feeling with
more to it stays: "I'm excited to start my new job").
"""

from __future__ import annotations

import re

from tulip_memory.extract.person import FIRST_PERSON, SECOND_PERSON
from tulip_memory.extract.words import EMPTY

_I = re.IGNORECASE
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_SUBJECTS = (
    r"i|i'm|i've|i'd|i'll|im|ive|we|we're|we've|my|our|it|it's|that|that's|this|he|she|"
    r"they|they're|there|mine"
)
_CLAUSE_BREAKS = re.compile(
    r"\s*;\s*|\s+[-\u2013\u2014]+\s+|\s*\.\.\.+\s*|,?\s+but\s+|,?\s+because\s+|,\s+so\s+|"
    rf",?\s+and\s+(?=(?:{_SUBJECTS})\b)(?!i\s+(?:are|were|have|had|both|will|would)\b)|,\s+(?=(?:{_SUBJECTS})\b)|,?\s+so\s+(?=(?:{_SUBJECTS})\b)",
    _I,
)
_LEAD = re.compile(
    r"^(?:(?:so|well|yeah|yes|yep|yup|oh|ooh|wow|haha|hah|lol|omg|honestly|anyway|anyways|"
    r"btw|by the way|also|and|but|plus|hey|hi|hello|ok|okay|um|uh|hmm|ah|aw|aww|totally|"
    r"sure|true|right|definitely|absolutely|thanks|thank you|cool|great|nice|awesome|gosh)"
    r"\b[\s,!.]*)+",
    _I,
)
_WORDS = re.compile(r"[a-z][a-z'-]*|\d+", _I)
#: "I'm so happy", "I was thrilled": a feeling of the moment is not a durable fact.
FEELINGS = re.compile(
    r"^(?:i'm|i am|i was|i've been|i feel|i felt|im)\s+(?:\w+ly\s+|so\s+|really\s+|very\s+|"
    r"super\s+|pretty\s+|a bit\s+|kind of\s+|kinda\s+)*"
    r"(?:happy|glad|sad|sorry|excited|thrilled|stoked|grateful|thankful|proud|tired|busy|"
    r"swamped|exhausted|stressed|nervous|worried|bummed|good|great|fine|okay|ok|relieved|"
    r"overwhelmed|amazed|touched|moved|inspired|impressed|curious|blessed|lucky|pumped|"
    r"psyched|hyped|keen to|in awe|speechless|sure|not sure|doing|determined|confident|"
    r"positive|motivated|optimistic|hopeful|hanging in)\b",
    _I,
)
_IMPERATIVE = re.compile(
    r"^(?:let's|lets|let me|try|check|take|go|keep|don't|do not|please|make sure|remember to|"
    r"consider|look|imagine|thanks|thank|congrats|congratulations|good luck|cheers|see)\b",
    _I,
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (typographic apostrophes made plain)."""
    cleaned = text.replace("\u2019", "'").replace("\u2018", "'")
    return [s.strip() for s in _SENTENCES.split(cleaned) if s.strip()]


def clauses(sentence: str) -> list[str]:
    """The clauses of one sentence, interjections dropped, end punctuation removed."""
    out = []
    for part in _CLAUSE_BREAKS.split(sentence):
        clause = _LEAD.sub("", part.strip()).strip(" ,.!;:-\"'()")
        if clause:
            out.append(clause)
    return out


def is_question(sentence: str) -> bool:
    return sentence.rstrip(" )\"'").endswith("?")


_TIME_LEAD = (
    r"(?:yesterday|today|tonight|recently|lately|finally|eventually|last \w+|this \w+|"
    r"next \w+|(?:a|\w+) (?:days?|weeks?|months?|years?) ago|on \w+|in \w+(?: \d+)?|"
    r"after \w+|before \w+|back then|since then)"
)
_SPEAKER_FIRST = re.compile(
    rf"^(?:{_TIME_LEAD}[,\s]+)?(?:i|i'm|i've|i'd|i'll|im|ive|we|we're|we've|we'd|we'll|my|our|"
    r"me and|myself)\b",
    _I,
)
_OPINION = re.compile(
    r"^i\s+(?:really\s+|honestly\s+|just\s+)?(?:think|guess|believe|feel like|feel that|bet|"
    r"suppose|reckon|know|mean|hope|wish|imagine|figure|admit|must say|have to say|gotta say)"
    r"(?:\s+that)?\s+",
    _I,
)
#: "We can make a difference", "I can imagine": platitudes and empathy, not facts.
_PLATITUDE = re.compile(
    r"^(?:we|we'll|we'd)\s+(?:can|could|should|must|might|may|will|would)\b|"
    r"^i\s+(?:can|could)(?:\s+only|\s+totally|\s+really)?\s+(?:imagine|picture|see|tell|relate|"
    r"understand|feel)\b",
    _I,
)


def speaker_clause(clause: str) -> str | None:
    """The clause as a statement by the speaker about themselves ("I think I'll go"
    is "I'll go"), or ``None`` when the speaker is not its subject."""
    clause = _OPINION.sub("", clause, count=1)
    if not _SPEAKER_FIRST.match(clause) or _PLATITUDE.match(clause):
        return None
    return clause


def about_speaker(clause: str) -> bool:
    """The clause speaks of the speaker and not to the other party."""
    return bool(FIRST_PERSON.search(clause)) and not SECOND_PERSON.search(clause)


def informative(clause: str) -> bool:
    """More than pronouns, feelings and filler, and not an instruction to the listener."""
    if _IMPERATIVE.match(clause):
        return False
    feeling = FEELINGS.match(clause)
    rest = clause[feeling.end() :] if feeling else clause
    return any(w.lower() not in EMPTY for w in _WORDS.findall(rest))
