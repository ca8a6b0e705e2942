"""An offline, deterministic extractor for demos and tests.

It reads the user's own messages, sentence by sentence, for a few conversational
signals: an explicit "remember that ...", a correction ("actually, ..."), a stated
fact about "my/our X", a preference ("I prefer/like/love/hate ..."), and a role
("I am a ...", "I work as ..."). Keys come from the subject of a fact, never from its
value, so a correction updates the fact it corrects: "my favourite colour is blue" and
"actually, my favourite colour is green" both have the key ``favourite-colour``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from tulip_memory.manager.memory import Memory, MemoryType
from tulip_memory.messages import Message, Role, message_id
from tulip_memory.times import TIME_FIELD

_I = re.IGNORECASE
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_EXPLICIT = re.compile(
    r"^(?:please\s+)?(?:remember|note|keep in mind|don't forget)"
    r"(?:\s+that\b|\s*[:,])?\s*(?P<rest>.+)$",
    _I,
)
_CORRECTION = re.compile(r"^(?:actually|correction|sorry|no|oops)\b[\s,:;!.-]*(?P<rest>.+)$", _I)
_POSSESSIVE = re.compile(
    r"^(?P<owner>my|our)\s+(?P<subj>[^,;:]{1,60}?)(?:'s|\s+(?P<verb>is|are|was|were))\s+(?P<val>.+)$",
    _I,
)
_THE_FACT = re.compile(r"^the\s+(?P<subj>[^,;:]{1,60}?)\s+(?P<verb>is|are)\s+(?P<val>.+)$", _I)
_FAN = re.compile(r"^(?:i am|i'm|im)\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of\s+(?P<obj>.+)$", _I)
_ROLE = re.compile(
    r"^(?:i am|i'm|im|i work as)\s+(?P<article>an?)\s+(?P<role>[a-z][\w /-]{1,60})$", _I
)
_WORK_AT = re.compile(r"^i\s+work\s+(?:at|for)\s+(?P<org>.+)$", _I)
_PREFERENCE = re.compile(
    r"^i\s+(?P<mods>(?:(?:do not|don't|really|also|absolutely|strongly|just)\s+)*)"
    r"(?P<verb>prefer|like|love|enjoy|hate|dislike|can't stand|cannot stand)\s+(?P<obj>.+)$",
    _I,
)
_COMPARISON = re.compile(r"^(?P<a>.+?)\s+(?:over|to|rather than|instead of)\s+(?P<b>.+)$", _I)
_INSTRUCTION = re.compile(
    r"^(?:to\s+)?(?P<rule>(?:always|never|don't|do not|please|avoid|stop|use)\b.+)$", _I
)
_MODALS = re.compile(r"^(?:(?:always|never|don't|do not|please|avoid|stop)\s+)+", _I)
_URL = re.compile(r"https?://\S+", _I)
_NOT_ROLES = {"bit", "little", "lot", "fan", "big", "huge", "few", "couple"}
_VERB_FORMS = {
    "prefer": "prefers",
    "like": "likes",
    "love": "loves",
    "enjoy": "enjoys",
    "hate": "hates",
    "dislike": "dislikes",
    "can't stand": "can't stand",
    "cannot stand": "cannot stand",
}
_CONFIDENCE = {"explicit": 0.9, "correction": 0.85, "statement": 0.7}
_MAX_KEY_WORDS = 6

Rule = Callable[[str, str], Memory | None]


def heuristic_extract(messages: Sequence[Message]) -> list[Memory]:
    """Memories stated in the user messages; a later statement of a key wins."""
    found: dict[tuple[MemoryType, str], Memory] = {}
    for message in messages:
        if message.role != Role.USER:
            continue
        for sentence in _sentences(message.content):
            memory = extract_sentence(sentence)
            if memory is not None:
                memory = _sourced(memory, message)
                found.pop((memory.type, memory.key), None)
                found[(memory.type, memory.key)] = memory
    return list(found.values())


def _sourced(memory: Memory, message: Message) -> Memory:
    """``memory`` with the id and time of the message that stated it, when known."""
    extra: dict[str, object] = {}
    if (mid := message_id(message)) is not None:
        extra["source_ids"] = [mid]
    if (when := message.metadata.get(TIME_FIELD)) is not None:
        extra["observed_at"] = when
    return replace(memory, metadata={**memory.metadata, **extra})


def extract_sentence(sentence: str) -> Memory | None:
    """The memory one sentence states, if any (a question states none)."""
    if sentence.rstrip().endswith("?"):
        return None
    rest, signal = _unwrap(sentence)
    rules = _RULES if signal == "statement" else (*_RULES, *_EXPLICIT_RULES)
    for rule in rules:
        memory = rule(rest, signal)
        if memory is not None:
            return memory
    return None


def slug(text: str, max_words: int = _MAX_KEY_WORDS) -> str:
    """A key fragment: lowercase words without articles, joined by ``-``."""
    words = re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))
    kept = [w for w in words if w not in {"a", "an", "the"}][:max_words]
    return "-".join(kept)[:64].strip("-")


def _sentences(text: str) -> list[str]:
    cleaned = text.replace("\u2019", "'")
    return [s.strip() for s in _SENTENCES.split(cleaned) if s.strip()]


def _unwrap(sentence: str) -> tuple[str, str]:
    """The claim inside a sentence, and the signal that framed it."""
    rest, signal = sentence.strip().rstrip(".!?").strip(), "statement"
    for _ in range(2):  # "Actually, remember that ..." has two frames
        if match := _EXPLICIT.match(rest):
            rest, signal = match["rest"].strip(), "explicit"
        elif match := _CORRECTION.match(rest):
            rest, signal = match["rest"].strip(), "correction"
        else:
            break
    return rest, signal


def _memory(kind: MemoryType, key: str, content: str, signal: str, rule: str) -> Memory | None:
    if not key:
        return None
    metadata = {"source": "heuristic", "signal": signal, "rule": rule}
    return Memory(
        type=kind,
        key=key,
        content=content,
        metadata={**metadata, "confidence": _CONFIDENCE[signal]},
    )


def _possessive(text: str, signal: str) -> Memory | None:
    match = _POSSESSIVE.match(text)
    if match is None:
        return None
    ours = match["owner"].lower() == "our"
    subject, verb = match["subj"].strip(), (match["verb"] or "is").lower()
    owner = "Our" if ours else "The user's"
    kind = MemoryType.PROJECT if ours else MemoryType.USER
    return _memory(kind, slug(subject), f"{owner} {subject} {verb} {match['val']}.", signal, "fact")


def _fan(text: str, signal: str) -> Memory | None:
    match = _FAN.match(text)
    if match is None:
        return None
    obj = match["obj"].strip()
    key = _key("preference", slug(obj))
    return _memory(MemoryType.USER, key, f"The user is a fan of {obj}.", signal, "preference")


def _role(text: str, signal: str) -> Memory | None:
    match = _ROLE.match(text)
    if match is None:
        return None
    role = match["role"].strip()
    words = role.lower().split()
    if not words or words[0] in _NOT_ROLES or len(words) > _MAX_KEY_WORDS:
        return None
    content = f"The user is {match['article'].lower()} {role}."
    return _memory(MemoryType.USER, "role", content, signal, "role")


def _work_at(text: str, signal: str) -> Memory | None:
    match = _WORK_AT.match(text)
    if match is None:
        return None
    org = match["org"].strip()
    return _memory(MemoryType.USER, "employer", f"The user works at {org}.", signal, "role")


def _preference(text: str, signal: str) -> Memory | None:
    match = _PREFERENCE.match(text)
    if match is None:
        return None
    verb, obj = match["verb"].lower(), match["obj"].strip()
    negated = bool(re.search(r"\b(?:do not|don't)\b", match["mods"], _I))
    phrase = f"does not {verb}" if negated else _VERB_FORMS[verb]
    topic = re.sub(r"^to\s+", "", obj, flags=_I)
    if verb == "prefer" and (pair := _COMPARISON.match(topic)):
        topic = "-vs-".join(sorted((slug(pair["a"], 3), slug(pair["b"], 3))))
    key = _key("preference", slug(topic))
    return _memory(MemoryType.USER, key, f"The user {phrase} {obj}.", signal, "preference")


def _the_fact(text: str, signal: str) -> Memory | None:
    match = _THE_FACT.match(text)
    if match is None:
        return None
    subject = match["subj"].strip()
    kind = MemoryType.REFERENCE if _URL.search(match["val"]) else MemoryType.PROJECT
    content = f"The {subject} {match['verb'].lower()} {match['val']}."
    return _memory(kind, slug(subject), content, signal, "fact")


def _instruction(text: str, signal: str) -> Memory | None:
    match = _INSTRUCTION.match(text)
    if match is None:
        return None
    rule = match["rule"].strip()
    key = _key("feedback", slug(_MODALS.sub("", rule)))
    return _memory(MemoryType.FEEDBACK, key, rule[:1].upper() + rule[1:] + ".", signal, "feedback")


def _note(text: str, signal: str) -> Memory | None:
    if signal != "explicit":
        return None  # a correction of nothing we can name is not keyable
    kind = MemoryType.REFERENCE if _URL.search(text) else MemoryType.USER
    content = text[:1].upper() + text[1:] + "."
    return _memory(kind, _key("note", slug(text)), content, signal, "note")


def _key(kind: str, topic: str) -> str:
    return f"{kind}-{topic}" if topic else ""


_RULES: tuple[Rule, ...] = (_possessive, _fan, _role, _work_at, _preference)
#: Only tried for a sentence framed as explicit or a correction.
_EXPLICIT_RULES: tuple[Rule, ...] = (_the_fact, _instruction, _note)
