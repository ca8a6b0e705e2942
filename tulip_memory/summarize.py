"""Running summaries of a thread, as background workers compute them.

A :class:`Summary` covers the messages ``[start, end)`` of a thread and carries their
:func:`fingerprint`, so a reader can tell whether it still describes the history in
front of it (a summary of another thread, or of a rewritten history, never matches).
:func:`extend_summary` extends a summary with the turns after it: with a litellm model
string, by one model call per chunk of turns (timeouts; 429/5xx retried with backoff,
never before a ``Retry-After``); without one, by :func:`extractive_summary`, an offline
and deterministic pick of each turn's most informative sentences within a budget.

Everything here but :func:`extend_summary` / :func:`summarize_history` is pure.
The model client is imported on first use only (:mod:`tulip_memory.chat`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tulip_memory.chat import Chat, ChatModel, Retries
from tulip_memory.errors import ModelCallError, TulipMemoryError
from tulip_memory.extract.prompt import render_transcript
from tulip_memory.messages import Message, Role

logger = logging.getLogger(__name__)

#: Version of the shape written by :meth:`Summary.to_dict`.
SUMMARY_VERSION = 1
#: The fingerprint of no messages; :func:`fingerprint` chains on from it.
EMPTY_FINGERPRINT = ""
#: Marks lines an extractive summary left out to stay within its budget.
ELIDED = "…"

TokenCounter = Callable[[str], int]

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_WORDS = re.compile(r"[a-z0-9][a-z0-9'_.-]*[a-z0-9]|[a-z0-9]")
_STOPWORD_TEXT = """
a about after again all also am an and any are as at be been before being both but by
hello hi hey can could did do does doing don't done for from further had has have having he her here
hers him his how i i'm if in into is it it's its just let's me more most my no nor not
now of off ok okay on once only or other our ours out over own please same she should so
some such than thank thanks that that's the their theirs them then there these they this
those through to too under until up very was we were what when where which while who
whom why will with would yes you your yours
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_MAX_SENTENCE_CHARS = 240
#: A model summary may run to this many characters a word asked for (a word is about
#: six; models overshoot): longer is no summary (the next one's prompt and every
#: compacted view would carry it).
MODEL_CHARS_PER_WORD = 16

SYSTEM_PROMPT = """\
You keep a running summary of a conversation, so that an assistant can carry on after \
older turns leave its context window. You are given the summary so far and the turns \
that follow it. Answer with the updated summary only: the summary so far, extended with \
what the new turns add. Keep the user's requests and goals, facts, names, numbers, \
decisions, tool results that matter, and open questions or next steps; leave out \
greetings and small talk. Write short plain sentences in the third person ("The user \
asked ..."), at most about {words} words in all. Do not answer questions from the \
conversation; only record them."""


class SummarizationError(ModelCallError):
    """A model summary that failed for good."""


class SummaryFormatError(TulipMemoryError, ValueError):
    """Summary data this version cannot read."""


class SummarySettingsError(TulipMemoryError, ValueError):
    """:class:`SummarySettings` that cannot work."""


def fingerprint(messages: Sequence[Message], previous: str = EMPTY_FINGERPRINT) -> str:
    """A digest of ``messages`` chained on from ``previous``.

    ``fingerprint(a + b) == fingerprint(b, fingerprint(a))``, so a summary extended
    with new turns knows the fingerprint of everything it covers without the old turns.
    """
    current = previous
    for message in messages:
        encoded = json.dumps(message.to_dict(), sort_keys=True, ensure_ascii=False, default=str)
        one = hashlib.blake2b(encoded.encode(), digest_size=16).digest()
        current = hashlib.blake2b(current.encode() + one, digest_size=16).hexdigest()
    return current


@dataclass(frozen=True, kw_only=True)
class Summary:
    """The summary ``text`` of a thread's messages ``[start, end)``.

    ``model`` is the litellm model that wrote it (``None``: extractive);
    ``fingerprint`` is :func:`fingerprint` of the covered messages.
    """

    text: str
    start: int = 0
    end: int
    fingerprint: str
    model: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise SummaryFormatError(f"bad range [{self.start}, {self.end})")
        if self.created_at.tzinfo is None:
            raise SummaryFormatError("created_at must be timezone-aware")

    @property
    def message_count(self) -> int:
        """How many messages this summary covers."""
        return self.end - self.start

    def matches(self, history: Sequence[Message]) -> bool:
        """Whether ``history[start:end]`` are exactly the messages this summary covers."""
        if self.end > len(history):
            return False
        return fingerprint(history[self.start : self.end]) == self.fingerprint

    def covers(self, history: Sequence[Message], start: int, end: int) -> bool:
        """Whether this summary stands for all of ``history[start:end]``."""
        return self.start <= start and end <= self.end and self.matches(history)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (``message_count`` is for readers; it is not read back)."""
        return {
            "version": SUMMARY_VERSION,
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "message_count": self.message_count,
            "fingerprint": self.fingerprint,
            "model": self.model,
            "created_at": self.created_at.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        """Inverse of :meth:`to_dict`; raises :class:`SummaryFormatError`."""
        version = data.get("version", SUMMARY_VERSION)
        if version != SUMMARY_VERSION:
            raise SummaryFormatError(f"summary version {version!r} is not readable")
        try:
            return cls(
                text=_typed(data["text"], str),
                start=_typed(data.get("start", 0), int),
                end=_typed(data["end"], int),
                fingerprint=_typed(data["fingerprint"], str),
                model=None if data.get("model") is None else _typed(data["model"], str),
                created_at=datetime.fromisoformat(_typed(data["created_at"], str)),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, SummaryFormatError):
                raise
            raise SummaryFormatError(f"malformed summary: {e!r}") from e


@dataclass(frozen=True, kw_only=True)
class SummarySettings:
    """How summaries are written.

    Model calls: ``api_base``/``api_key`` (else litellm's environment), a ``timeout``
    per attempt, ``max_retries`` after the first, exponential ``backoff`` up to
    ``max_backoff`` (a ``Retry-After`` beyond it fails at once), and turns sent in
    chunks of at most ``max_input_tokens``. ``summary_words`` is the length asked of
    the model; ``max_chars`` and ``sentences_per_turn`` bound the extractive summary.
    """

    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_input_tokens: int = 6_000
    max_output_tokens: int = 1_024
    summary_words: int = 400
    temperature: float = 0.0
    max_chars: int = 4_000
    sentences_per_turn: int = 1

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.max_retries < 0 or self.backoff < 0:
            raise SummarySettingsError("timeout must be positive, max_retries and backoff >= 0")
        if min(self.max_input_tokens, self.max_output_tokens, self.summary_words) < 1:
            raise SummarySettingsError("token and word budgets must be positive")
        if self.max_chars < 1 or self.sentences_per_turn < 1:
            raise SummarySettingsError("max_chars and sentences_per_turn must be positive")


async def extend_summary(
    previous: Summary | None,
    messages: Sequence[Message],
    *,
    model: str | None,
    settings: SummarySettings | None = None,
    start: int = 0,
    now: datetime | None = None,
) -> Summary:
    """``previous`` extended with ``messages``, the turns right after it covers (from
    message ``start`` of the thread when there is no ``previous``).

    With ``model`` the text is written by that litellm model (raises
    :class:`SummarizationError`); without, it is :func:`extractive_summary`.
    """
    config = settings or SummarySettings()
    first = previous.start if previous is not None else start
    offset = previous.end if previous is not None else start
    chained = fingerprint(messages, previous.fingerprint if previous is not None else "")
    old_text = previous.text if previous is not None else None
    if model is None:
        text = extractive_summary(
            old_text,
            messages,
            max_chars=config.max_chars,
            sentences_per_turn=config.sentences_per_turn,
        )
    else:
        text = await _model_summary(old_text, messages, model, config)
    return Summary(
        text=text,
        start=first,
        end=offset + len(messages),
        fingerprint=chained,
        model=model,
        created_at=now or datetime.now(UTC),
    )


async def summarize_history(
    history: Sequence[Message],
    previous: Summary | None = None,
    *,
    model: str | None,
    settings: SummarySettings | None = None,
    end: int | None = None,
    now: datetime | None = None,
) -> Summary:
    """A summary of ``history[:end]`` (all of it by default), extending ``previous``
    when it still matches ``history`` and ends no later; otherwise written afresh."""
    stop = len(history) if end is None else end
    if not 0 <= stop <= len(history):
        raise SummaryFormatError(f"end {stop} is outside a history of {len(history)} messages")
    base = previous if previous is not None and _extendable(previous, history, stop) else None
    if base is not None and base.end == stop:
        return base
    offset = base.end if base is not None else 0
    return await extend_summary(base, history[offset:stop], model=model, settings=settings, now=now)


# -- extractive (offline) summaries --------------------------------------------------


def extractive_summary(
    previous: str | None,
    messages: Sequence[Message],
    *,
    max_chars: int = 4_000,
    sentences_per_turn: int = 1,
) -> str:
    """``previous`` followed by a line per turn of ``messages`` (its most informative
    sentences), within ``max_chars``: when over, the first line (the opening request)
    and the newest lines are kept, with :data:`ELIDED` between them. Deterministic."""
    lines = [line for line in (previous or "").splitlines() if line.strip()]
    lines.extend(turn_lines(messages, sentences_per_turn))
    return fit_lines(lines, max_chars)


def turn_lines(messages: Sequence[Message], sentences_per_turn: int = 1) -> list[str]:
    """One line per user, assistant or tool message: who, and the sentences of it that
    carry the most information (rare words count more than common ones). A user turn
    gets twice ``sentences_per_turn``: it states the task."""
    sentences = [_sentences(m.content) for m in messages]
    frequency = Counter(w for turn in sentences for s in turn for w in set(_content_words(s)))
    total = sum(len(turn) for turn in sentences)
    lines: list[str] = []
    for message, turn in zip(messages, sentences, strict=True):
        wanted = sentences_per_turn * (2 if message.role == Role.USER else 1)
        picked = _pick(turn, frequency, total, wanted)
        line = _line(message, " ".join(picked))
        if line:
            lines.append(line)
    return lines


def fit_lines(lines: Sequence[str], max_chars: int) -> str:
    """``lines`` joined, or the first line, :data:`ELIDED` and the newest that fit."""
    text = "\n".join(lines)
    if len(text) <= max_chars or len(lines) < 2 or max_chars <= len(ELIDED) + 1:
        return text[:max_chars]
    head = lines[0][: max(0, max_chars - len(ELIDED) - 1)]
    budget = max_chars - len(head) - len(ELIDED) - 2
    tail: list[str] = []
    for line in reversed(lines[1:]):
        if len(line) + 1 > budget:
            break
        tail.append(line)
        budget -= len(line) + 1
    return "\n".join([head, ELIDED, *reversed(tail)])


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


def _content_words(sentence: str) -> list[str]:
    return [w for w in _WORDS.findall(sentence.lower()) if w not in _STOPWORDS]


def _score(sentence: str, frequency: Counter[str], total: int) -> float:
    """Sum of the inverse sentence frequency of its distinct content words; a word
    with a digit (a date, an amount, an id) counts half again."""
    score = 0.0
    for word in set(_content_words(sentence)):
        weight = math.log((1 + total) / (1 + frequency[word])) + 1
        score += weight * (1.5 if any(c.isdigit() for c in word) else 1.0)
    return score


def _pick(sentences: list[str], frequency: Counter[str], total: int, count: int) -> list[str]:
    """The ``count`` best sentences in their order; one without a content word only
    when the turn has nothing better."""
    scores = [_score(s, frequency, total) for s in sentences]
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen = [i for i in ranked[:count] if scores[i] > 0] or ranked[:1]
    return [_clip(sentences[i]) for i in sorted(chosen)]


def _clip(sentence: str) -> str:
    if len(sentence) <= _MAX_SENTENCE_CHARS:
        return sentence
    return sentence[: _MAX_SENTENCE_CHARS - 1].rstrip() + ELIDED


def _line(message: Message, text: str) -> str:
    if message.role == Role.SYSTEM:
        return ""
    if message.role == Role.TOOL:
        name = f" {message.name}" if message.name else ""
        return f"Tool result{name}: {text}" if text else ""
    who = message.role.value.capitalize()
    calls = ", ".join(call.name for call in message.tool_calls)
    if calls:
        text = f"{text} [called {calls}]".strip()
    return f"{who}: {text}" if text else ""


# -- model summaries -----------------------------------------------------------------


def build_prompt(previous: str | None, lines: Sequence[str], words: int) -> list[dict[str, str]]:
    """Chat messages asking a model to extend ``previous`` with the turns ``lines``."""
    so_far = previous.strip() if previous and previous.strip() else "(none yet)"
    user = f"Summary so far:\n{so_far}\n\nNew turns:\n" + "\n".join(lines)
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(words=words)},
        {"role": "user", "content": user},
    ]


def chunk_lines(lines: Sequence[str], budget: int, count: TokenCounter) -> list[list[str]]:
    """``lines`` in order, in chunks of at most ``budget`` tokens each; a line alone
    over budget is cut to fit."""
    chunks: list[list[str]] = []
    current: list[str] = []
    used = 0
    for line in lines:
        cost = count(line)
        if cost > budget:
            line = _cut(line, budget, count)
            cost = count(line)
        if current and used + cost > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(line)
        used += cost
    if current:
        chunks.append(current)
    return chunks


def _cut(line: str, budget: int, count: TokenCounter) -> str:
    while line and count(line) > budget:
        line = line[: len(line) // 2]
    return line


async def _model_summary(
    previous: str | None, messages: Sequence[Message], model: str, config: SummarySettings
) -> str:
    chat = Chat(ChatModel(model=model, api_base=config.api_base, api_key=config.api_key))
    await chat.load()
    retries = Retries(
        timeout=config.timeout,
        max_retries=config.max_retries,
        backoff=config.backoff,
        max_backoff=config.max_backoff,
    )
    text = previous or ""
    lines = render_transcript(messages)
    for chunk in chunk_lines(lines, config.max_input_tokens, chat.count_tokens):
        reply = await chat.complete(
            build_prompt(text, chunk, config.summary_words),
            temperature=config.temperature,
            max_tokens=config.max_output_tokens,
            retries=retries,
            error=SummarizationError,
            what="summary call",
        )
        text = reply.content.strip()
        if not text:
            raise SummarizationError(
                f"{model} answered with an empty summary", attempts=reply.usage.attempts
            )
        if len(text) > config.summary_words * MODEL_CHARS_PER_WORD:
            raise SummarizationError(
                f"{model} answered with a summary of {len(text):,} characters, over "
                f"{config.summary_words * MODEL_CHARS_PER_WORD:,} for {config.summary_words} "
                "words",
                attempts=reply.usage.attempts,
            )
    return text


def _extendable(previous: Summary, history: Sequence[Message], stop: int) -> bool:
    return previous.end <= stop and previous.matches(history)


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SummaryFormatError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value
