"""First person to third: "I've moved to Lisbon" said by Maya is "Maya has moved to
Lisbon".

The speaker's pronouns (I, me, my, mine, myself; we, us, our for the speaker and
others) become the speaker's name (or "the user"), and the verb right after a
subject "I" (past the adverbs between them) agrees with a third-person subject.
Rules over words, no parser: a present-tense verb gains its -s, a past-tense or modal
one is left alone.
"""

from __future__ import annotations

import re

from tulip_memory.extract.words import ADVERBS, MODALS, PAST, PRESENT_ED

_I = re.IGNORECASE
FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|"
    r"we'd|we'll|us|our|ours|ourselves)\b",
    _I,
)
SECOND_PERSON = re.compile(r"\b(?:you|you're|you've|you'd|you'll|your|yours|yourself|ya|u)\b", _I)
_IRREGULAR_PRESENT = {"am": "is", "have": "has", "do": "does", "go": "goes", "are": "is"}
#: Subject contractions and negations, each with its third-person form.
_CONTRACTED = {
    "I'm": "{s} is",
    "I've": "{s} has",
    "I'd": "{s} would",
    "I'll": "{s} will",
    "I don't": "{s} does not",
    "I do not": "{s} does not",
    "I haven't": "{s} has not",
    "I have not": "{s} has not",
    "we're": "{s} and others are",
    "we've": "{s} and others have",
    "we'd": "{s} and others would",
    "we'll": "{s} and others will",
}
_CONTRACTIONS = tuple((re.compile(rf"\b{k}\b", _I), v) for k, v in _CONTRACTED.items())
_GAP = "|".join(["no longer", *sorted(ADVERBS)])
_SUBJECT_I = re.compile(rf"\bI\b(?P<gap>(?:\s+(?:{_GAP}))*)\s+(?P<verb>[a-z']+)")
_LOWER_I = re.compile(r"(?<![\w'])i(?=\s|'|$)")
#: The speaker's other pronouns: (pattern, first mention, later mentions).
_OBJECTS = (
    (re.compile(r"\bwe\b", _I), "{s} and others", "{s} and others"),
    (re.compile(r"\bI\b"), "{s}", "{s}"),
    (re.compile(r"\bmyself\b", _I), "themselves", "themselves"),
    (re.compile(r"\bourselves\b", _I), "themselves", "themselves"),
    (re.compile(r"\b(?:mine|ours)\b", _I), "{p}", "theirs"),
    (re.compile(r"\b(?:my|our)\b", _I), "{p}", "their"),
    (re.compile(r"\bme\b", _I), "{s}", "them"),
    (re.compile(r"\bus\b", _I), "{s} and others", "them"),
)


_SLANG = (
    (re.compile(r"\bgonna\b", _I), "going to"),
    (re.compile(r"\bwanna\b", _I), "want to"),
    (re.compile(r"\bkinda\b", _I), "kind of"),
)


def third_person(clause: str, name: str | None, *, capitalize: bool = True) -> str:
    """``clause`` (the speaker's words) with the speaker named; capitalised first
    unless ``capitalize`` is false."""
    subject = name or "the user"
    possessive = f"{subject}'s"
    out = _LOWER_I.sub("I", clause)
    for pattern, plain in _SLANG:
        out = pattern.sub(plain, out)
    for pattern, template in _CONTRACTIONS:
        out = pattern.sub(template.format(s=subject), out)
    out = _SUBJECT_I.sub(lambda m: f"{subject}{m['gap']} {_agree(m)}", out)
    for pattern, first, later in _OBJECTS:
        out = _named(out, pattern, first.format(s=subject, p=possessive), later.format(s=subject))
    return out[:1].upper() + out[1:] if capitalize else out


def _named(text: str, pattern: re.Pattern[str], first: str, later: str) -> str:
    """Each match replaced: by ``first`` until the speaker is named, then ``later``."""
    parts: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        before = "".join(parts) + text[last : m.start()]
        named = first.split("'")[0] in before if first[:1].isalpha() else False
        parts.append(text[last : m.start()] + (later if named else first))
        last = m.end()
    return "".join(parts) + text[last:]


def _agree(m: re.Match[str]) -> str:
    """The verb after "I", unless "X and I" make it plural ("my husband and I are")."""
    joint = m.string[max(0, m.start() - 4) : m.start()].lower() == "and "
    if joint and m["verb"].lower() in ("are", "were", "have", "do", "go"):
        return m["verb"]
    return conjugate(m["verb"])


def _past(word: str) -> bool:
    """An irregular past form, also with a prefix (retook, overslept, misunderstood)."""
    return word in PAST or any(word.endswith(p) for p in PAST if len(p) >= 4)


def conjugate(verb: str) -> str:
    """The third-person singular of a verb that followed "I"."""
    low = verb.lower()
    if low in _IRREGULAR_PRESENT:
        return _IRREGULAR_PRESENT[low]
    past_ed = low.endswith("ed") and low not in PRESENT_ED
    if low in MODALS or past_ed or low.endswith(("n't", "'d")) or "'" in low or _past(low):
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"
