"""An offline, deterministic extractor of facts about the user from natural chat.

It reads the user's own messages, clause by clause (:mod:`.clauses`): a clause that
speaks of the speaker, is not a question, does not speak to the other party and says
more than a feeling or filler becomes one self-contained third-person memory
(:mod:`.person`: "I just moved to Lisbon" by Maya is "Maya just moved to Lisbon"),
relative dates made absolute against the message's time (:mod:`.dates`).

Keys name what a fact is about, never its value, so a later statement replaces the
one it corrects: identity (``name``, ``nationality``, ``role``, ``identity-*``),
places (``home``, ``origin``), people (``relationship-status``, ``has-*``,
``<relation>-name``), preferences and dislikes (``preference-*``, ``allergy-*``,
``diet-*``), plans (``plan-*``), facts stated as "my X is Y" (the slug of X); any
other statement is keyed by its own words (``fact-*``). An explicit "remember
that ..." or a correction ("actually, ...") frames a sentence; only framed
sentences may state facts that are not about the speaker (the deploy URL is ...) or
instructions (always run the tests).

Rules over words, chosen over a statistical parser: spaCy's English pipelines are
not published on PyPI by their authors (only third-party re-uploads are), and a
tagger does not decide what is worth remembering; the rules are tested on their own
corpus of natural sentences (``tests/extract/test_heuristic.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tulip_memory.extract.clauses import (
    about_speaker,
    clauses,
    informative,
    is_question,
    speaker_clause,
)
from tulip_memory.extract.clauses import sentences as _sentences
from tulip_memory.extract.dates import resolve
from tulip_memory.extract.person import SECOND_PERSON, third_person
from tulip_memory.extract.words import DEMONYMS, NOT_ROLES, STOP
from tulip_memory.manager.memory import Memory, MemoryType
from tulip_memory.messages import Message, Role, message_id
from tulip_memory.times import TIME_FIELD, stated_time

_I = re.IGNORECASE
_EXPLICIT = re.compile(
    r"^(?:please\s+)?(?:remember|note|keep in mind|don't forget)"
    r"(?:\s+that\b|\s*[:,])?\s*(?P<rest>.+)$",
    _I,
)
_CORRECTION = re.compile(
    r"^(?:actually|correction|sorry|no|oops|wait)\b[\s,:;!.-]*(?P<rest>.+)$", _I
)
_URL = re.compile(r"https?://\S+", _I)
_CONFIDENCE = {"explicit": 0.9, "correction": 0.85, "statement": 0.7}
_MAX_KEY_WORDS = 6
_MAX_CONTENT = 400
RELATIONS = (
    "wife|husband|partner|boyfriend|girlfriend|fiance|fiancee|son|daughter|kids?|children|"
    "mom|mum|mother|dad|father|parents|brother|sister|siblings?|grandma|grandmother|"
    "grandpa|grandfather|aunt|uncle|cousin|niece|nephew|best friend|friend|boss|"
    "manager|colleague|coworker|roommate|flatmate|neighbou?r|dog|cat|puppy|kitten|pet"
)
_OCCUPATION = re.compile(
    r"(?:er|or|ist|ian|ant|ent|eer|ogist|smith|nurse|chef|cook|student|lawyer|doctor|"
    r"dentist|pilot|artist|teacher|coach|clerk|barista|vet|medic|intern|founder|"
    r"freelancer|nanny|midwife|surgeon|paramedic|model|tutor|analyst|assistant)$",
    _I,
)


@dataclass(frozen=True)
class Said:
    """Who said a clause and when: what its memory is written with."""

    name: str | None = None
    when: float | None = None
    signal: str = "statement"

    @property
    def subject(self) -> str:
        return self.name or "The user"


def heuristic_extract(messages: Sequence[Message]) -> list[Memory]:
    """Memories stated in the user messages; a later statement of a key wins."""
    found: dict[tuple[MemoryType, str], Memory] = {}
    for message in messages:
        if message.role != Role.USER:
            continue
        for memory in message_memories(message.content, message.name, _time(message)):
            memory = _sourced(memory, message)
            found.pop((memory.type, memory.key), None)
            found[(memory.type, memory.key)] = memory
    return list(found.values())


def message_memories(text: str, name: str | None = None, when: float | None = None) -> list[Memory]:
    """The memories one message of the user states."""
    return [m for s in _sentences(text) for m in sentence_memories(s, name, when)]


def extract_sentence(
    sentence: str, name: str | None = None, when: float | None = None
) -> Memory | None:
    """The first memory one sentence states, if any (a question states none)."""
    found = sentence_memories(sentence, name, when)
    return found[0] if found else None


def sentence_memories(
    sentence: str, name: str | None = None, when: float | None = None
) -> list[Memory]:
    """The memories of one sentence: one per clause that states a fact."""
    if is_question(sentence):
        return []
    rest, signal = _unwrap(sentence)
    said = Said(name, when, signal)
    out = [m for c in clauses(rest) if (m := clause_memory(c, said)) is not None]
    if not out and signal != "statement":
        out = [m for rule in _FRAMED if (m := rule(rest.rstrip(".!"), said)) is not None][:1]
    return out


def clause_memory(clause: str, said: Said) -> Memory | None:
    """The memory one clause states about its speaker, if any."""
    spoken = speaker_clause(_SUBJECTLESS.sub(_restore_subject, _VOCATIVE.sub("", clause)))
    if spoken is None or not about_speaker(spoken) or not informative(spoken):
        return None
    clause = spoken
    for rule in _RULES:
        found = rule(clause, said)
        if found is not None:
            return found
    words = [w for w in re.findall(r"[a-z0-9']+", clause.lower()) if w not in STOP]
    if len(words) < (3 if re.match(r"^(?:my|our)\b", clause, _I) else 2):
        return None
    return _memory(MemoryType.USER, f"fact-{slug(' '.join(words))}", _content(clause, said), said)


def slug(text: str, max_words: int = _MAX_KEY_WORDS) -> str:
    """A key fragment: lowercase words without articles, joined by ``-``."""
    words = re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))
    kept = [w for w in words if w not in {"a", "an", "the"}][:max_words]
    return "-".join(kept)[:64].strip("-")


# -- framing, content, the memory -------------------------------------------------------


def _unwrap(sentence: str) -> tuple[str, str]:
    """The claim inside a sentence, and the signal that framed it."""
    rest, signal = sentence.strip(), "statement"
    for _ in range(2):  # "Actually, remember that ..." has two frames
        if match := _EXPLICIT.match(rest):
            rest, signal = match["rest"].strip(), "explicit"
        elif match := _CORRECTION.match(rest):
            rest, signal = match["rest"].strip(), "correction"
        else:
            break
    return rest, signal


def _content(clause: str, said: Said) -> str:
    """The clause in the third person, dates absolute, as one sentence."""
    text = resolve(third_person(clause, said.name), said.when).strip()
    text = _VOCATIVE.sub("", text)[:_MAX_CONTENT].rstrip(" ,;:")
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!")) else text + "."


def _memory(
    kind: MemoryType, key: str, content: str, said: Said, rule: str = "statement"
) -> Memory | None:
    if not key:
        return None
    metadata = {
        "source": "heuristic",
        "signal": said.signal,
        "rule": rule,
        "confidence": _CONFIDENCE[said.signal],
    }
    return Memory(type=kind, key=key[:120], content=content, metadata=metadata)


def _time(message: Message) -> float | None:
    try:
        return stated_time(message.metadata)
    except ValueError:
        return None


def _sourced(memory: Memory, message: Message) -> Memory:
    """``memory`` with the id and time of the message that stated it, when known."""
    extra: dict[str, object] = {}
    if (mid := message_id(message)) is not None:
        extra["source_ids"] = [mid]
    if (when := message.metadata.get(TIME_FIELD)) is not None:
        extra["observed_at"] = when
    return replace(memory, metadata={**memory.metadata, **extra})


#: "..., Jon": the listener's name at the end of a clause.
_VOCATIVE = re.compile(r",\s*[A-Z][a-z]+[!.]?$")
_SUBJECTLESS = re.compile(
    r"^(?P<w>gonna|going to|planning|thinking of|thinking about|heading|hoping|trying|"
    r"looking forward|wanna|just got|just finished|just started|got|went|started|"
    r"finished|spent)\b",
    _I,
)


def _restore_subject(m: re.Match[str]) -> str:
    """ "Gonna start a course" is the speaker's: "I'm gonna start a course"."""
    word = m["w"].lower()
    if word.startswith(
        ("gonna", "going", "planning", "thinking", "heading", "hoping", "trying", "looking")
    ):
        return f"I'm {word}"
    return f"I {word}"


# -- keyed rules: (clause, said) -> memory | None ----------------------------------------

Rule = Callable[[str, Said], Memory | None]


def _rule(
    pattern: str, key: Callable[[re.Match[str]], str], rule: str, kind: MemoryType = MemoryType.USER
) -> Rule:
    compiled = re.compile(pattern, _I)

    def apply(clause: str, said: Said) -> Memory | None:
        match = compiled.match(clause)
        if match is None:
            return None
        return _memory(kind, key(match), _content(clause, said), said, rule)

    return apply


def _name(clause: str, said: Said) -> Memory | None:
    match = re.match(
        r"^(?i:my name is|my name's|call me|i'm called|i am called|people call me|"
        r"i'm|i am|im)\s+(?P<v>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)$",
        clause,
    )
    if match is None or match["v"].lower() in DEMONYMS:
        return None
    content = f"The user's name is {match['v']}."
    return _memory(MemoryType.USER, "name", content, said, "identity")


def _nationality(clause: str, said: Said) -> Memory | None:
    match = re.match(r"^(?:i'm|i am|im)\s+(?:an?\s+)?(?P<v>[a-z]+)\b", clause, _I)
    if match is None or match["v"].lower() not in DEMONYMS:
        return None
    return _memory(MemoryType.USER, "nationality", _content(clause, said), said, "identity")


def _role(clause: str, said: Said) -> Memory | None:
    match = re.match(
        r"^(?:i am|i'm|im|i work as|i'm working as|i am working as)\s+(?:now\s+)?"
        r"(?P<article>an?)\s+(?P<role>[a-z][\w '/-]{1,60}?)(?:\s+(?:by profession|now))?$",
        clause,
        _I,
    )
    if match is None:
        return None
    words = match["role"].lower().split()
    if not words or words[0] in NOT_ROLES:
        return None
    head = re.split(r"\s+(?:at|in|for|with|from|of|and|who|that)\s+", match["role"].lower())[0]
    if not (_OCCUPATION.search(head.split()[-1]) or clause.lower().startswith("i work")):
        return _memory(
            MemoryType.USER,
            f"identity-{slug(match['role'])}",
            _content(clause, said),
            said,
            "identity",
        )
    return _memory(MemoryType.USER, "role", _content(clause, said), said, "role")


def _possessive(clause: str, said: Said) -> Memory | None:
    """ "My X is Y" (and "my name's Y"): keyed by X. "Our X" is the user's and others':
    a project fact."""
    match = re.match(
        r"^(?P<owner>my|our)\s+(?P<subj>[^,;:]{1,60}?)(?:\s+(?P<verb>is|are|was|were)|"
        r"(?<=name)'s)\s+(?P<val>.+)$",
        clause,
        _I,
    )
    if match is None or re.search(r"\b(?:i|me|it|you)\b|'s\b", match["subj"], _I):
        return None
    ours = match["owner"].lower() == "our"
    subject, verb = match["subj"].strip(), (match["verb"] or "is").lower()
    kind = MemoryType.PROJECT if ours else MemoryType.USER
    value = third_person(resolve(match["val"], said.when), said.name, capitalize=False)
    content = f"{said.subject}'s {subject} {verb} {value}."
    return _memory(kind, slug(subject), content, said, "fact")


def _fan(clause: str, said: Said) -> Memory | None:
    match = re.match(
        r"^(?:i am|i'm|im)\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of\s+(?P<obj>.+)$", clause, _I
    )
    if match is None:
        return None
    key = f"preference-{slug(match['obj'])}"
    content = f"{said.subject} is a fan of {match['obj'].strip()}."
    return _memory(MemoryType.USER, key, content, said, "preference")


def _preference(clause: str, said: Said) -> Memory | None:
    match = re.match(
        r"^i\s+(?P<mods>(?:(?:do not|don't|really|also|absolutely|strongly|just|totally|"
        r"kinda|still|actually|truly)\s+)*)"
        r"(?P<verb>prefer|like|love|enjoy|hate|dislike|can't stand|cannot stand|adore)\s+"
        r"(?P<obj>.+)$",
        clause,
        _I,
    )
    if match is None:
        return None
    obj = re.sub(r"^to\s+", "", match["obj"].strip(), flags=_I)
    if re.match(r"^(?:it|that|this|them|those|these|him|her|when|how|what)\b", obj, _I):
        return None  # "I love it when ...": the object is not named
    if match["verb"].lower() == "prefer" and (
        pair := re.match(r"^(?P<a>.+?)\s+(?:over|to|rather than|instead of)\s+(?P<b>.+)$", obj, _I)
    ):
        obj = "-vs-".join(sorted((slug(pair["a"], 3), slug(pair["b"], 3))))
    key = f"preference-{slug(obj)}"
    return _memory(MemoryType.USER, key, _content(clause, said), said, "preference")


_RULES: tuple[Rule, ...] = (
    _name,
    _nationality,
    _rule(
        r"^i(?:'m| am|m)?\s+(?:\w+ly\s+|now\s+|just\s+)*(?P<v>single|married|engaged|divorced|"
        r"widowed|separated|dating|in a relationship)\b",
        lambda m: "relationship-status",
        "people",
    ),
    _rule(
        r"^i\s+(?:\w+ly\s+|just\s+|now\s+|still\s+)*(?:work|am working|'m working)\s+"
        r"(?:\w+\s+)?(?:at|for)\s+(?P<v>.+)$|^i(?:'m| am)\s+(?:now\s+)?working\s+(?:at|for)\s+"
        r"|^i\s+(?:just\s+|recently\s+|finally\s+)?(?:joined|started at|started working at|"
        r"got a job at|got hired at|took a job at)\s+(?P<w>[A-Z].*)$"
        r"|^i\s+(?:do not|don't|no longer)\s+work\s+(?:at|for)\s+",
        lambda m: "employer",
        "role",
    ),
    _role,
    _rule(
        r"^i(?:'ve|\s+have)?\s+(?:\w+ly\s+|just\s+|now\s+|finally\s+)*(?:live|lived|moved|"
        r"relocated|settled|am based|'m based|am living|'m living|am moving|'m moving)\b"
        r"(?:(?!\bfrom\b).)*?\b(?:in|to)\s+(?P<v>[A-Z][\w .'-]*)",
        lambda m: "home",
        "place",
    ),
    _rule(
        r"^i(?:'m| am|m)\s+(?:originally\s+)?from\s+(?P<v>.+)$|^i\s+(?:grew up|was raised)\s+in\s+",
        lambda m: "origin",
        "place",
    ),
    _rule(r"^i\s+was\s+born\s+(?:in|on)\s+", lambda m: "birth", "identity"),
    _rule(
        r"^(?:i have|i've got|i got|we have|we've got)\s+(?P<n>a|an|one|two|three|four|five|"
        rf"six|\d+)\s+(?:\w+\s+)?(?P<rel>{RELATIONS})\b",
        lambda m: f"has-{slug(m['rel']).rstrip('s')}",
        "people",
    ),
    _rule(
        rf"^my\s+(?P<rel>{RELATIONS})(?:'s name is|\s+is called|\s+is named|\s+named|,)\s+"
        r"[A-Z]\w+$",
        lambda m: f"{slug(m['rel'])}-name",
        "people",
    ),
    _rule(
        r"^i(?:'m| am|m)\s+(?:\w+ly\s+|also\s+)*(?P<v>vegetarian|vegan|pescatarian|"
        r"gluten[- ]free|lactose[- ]intolerant|teetotal|sober)\b",
        lambda m: "diet",
        "preference",
    ),
    _rule(
        r"^i(?:'m| am|m)\s+(?:\w+ly\s+|also\s+)*allergic\s+to\s+(?P<v>.+)$",
        lambda m: f"allergy-{slug(m['v'], 3)}",
        "preference",
    ),
    _rule(
        r"^i\s+(?:only\s+|usually\s+|always\s+|never\s+|don't\s+|do not\s+|mostly\s+)*"
        r"(?P<verb>eat|drink)\s+(?P<v>.+)$",
        lambda m: f"diet-{m['verb'].lower()}-{slug(m['v'], 3)}",
        "preference",
    ),
    _fan,
    _preference,
    _rule(
        r"^(?:i'm|i am|im|we're|we are)\s+(?:\w+ly\s+|also\s+|still\s+)*(?:going to|gonna|"
        r"planning (?:to|on)|thinking (?:of|about)|hoping to|about to|looking forward to|"
        r"getting ready to|aiming to)\s+(?P<v>.+)$"
        r"|^(?:i|we)\s+(?:\w+ly\s+|also\s+|still\s+)*(?:plan|want|intend|hope|need|aim|mean|"
        r"wanna)\s+(?:to\s+)?(?P<w>.+)$"
        r"|^(?:i|we)(?:'ll|\s+will|'d like to|\s+would like to|'d love to|\s+would love to)\s+"
        r"(?P<x>.+)$",
        lambda m: f"plan-{slug(m['v'] or m['w'] or m['x'])}",
        "plan",
    ),
    _possessive,
)


# -- only in a framed sentence ("remember that ...", "actually, ...") ----------------------


def _the_fact(text: str, said: Said) -> Memory | None:
    match = re.match(r"^the\s+(?P<subj>[^,;:]{1,60}?)\s+(?P<verb>is|are)\s+(?P<val>.+)$", text, _I)
    if match is None:
        return None
    subject = match["subj"].strip()
    kind = MemoryType.REFERENCE if _URL.search(match["val"]) else MemoryType.PROJECT
    content = f"The {subject} {match['verb'].lower()} {match['val']}."
    return _memory(kind, slug(subject), content, said, "fact")


def _instruction(text: str, said: Said) -> Memory | None:
    match = re.match(
        r"^(?:to\s+)?(?P<rule>(?:always|never|don't|do not|please|avoid|stop|use)\b.+)$", text, _I
    )
    if match is None:
        return None
    rule = match["rule"].strip()
    modals = re.compile(r"^(?:(?:always|never|don't|do not|please|avoid|stop)\s+)+", _I)
    key = f"feedback-{slug(modals.sub('', rule))}"
    content = rule[:1].upper() + rule[1:] + "."
    return _memory(MemoryType.FEEDBACK, key, content, said, "feedback")


def _note(text: str, said: Said) -> Memory | None:
    if said.signal != "explicit" or SECOND_PERSON.search(text):
        return None  # a correction of nothing we can name is not keyable; advice is no note
    kind = MemoryType.REFERENCE if _URL.search(text) else MemoryType.USER
    content = text[:1].upper() + text[1:] + "."
    return _memory(kind, f"note-{slug(text)}", content, said, "note")


_FRAMED: tuple[Callable[[str, Said], Memory | None], ...] = (_the_fact, _instruction, _note)
