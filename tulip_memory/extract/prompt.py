"""The extraction prompt: instructions, output schema, and a transcript within budget.

Pure functions; token counting is passed in, so the budget logic is testable without
a tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tulip_memory.manager.memory import Memory, MemoryType
from tulip_memory.messages import Message, Role, message_id
from tulip_memory.times import stated_time

TokenCounter = Callable[[str], int]

OMITTED = "[earlier conversation omitted]"
MAX_TOOL_CHARS = 1_000

SYSTEM_PROMPT = f"""\
You maintain an assistant's long-term memory about a user and their work. Read the \
conversation and return the facts worth remembering in later, unrelated conversations.

Memory types:
- user: who the user is: role, expertise, stable preferences and personal facts.
- feedback: how the user wants the assistant to behave (corrections, rules, style).
- project: facts about the user's ongoing work: goals, decisions, deadlines, constraints.
- reference: where to find things: URLs, documents, systems, identifiers.

Rules:
- Only durable facts the user stated or clearly confirmed; nothing about this one task \
that will not matter later, no guesses, no secrets such as passwords or keys.
- Existing memories are listed first. To update or correct one, reuse its exact type \
and key; never add a second memory for a fact that already has a key.
- A key names the fact's subject, not its value: lowercase words joined by hyphens \
(e.g. "favourite-colour", "preferred-language").
- content is one self-contained sentence in the third person.
- why says what in the conversation shows it; how_to_apply says how to use it later; \
confidence is between 0 and 1.
- Messages are labelled with their id and time when known: sources lists the ids of \
the messages a memory comes from. Write dates as calendar dates resolved against the \
message's time ("yesterday" in a message of Mon 8 May 2023 is 7 May 2023), never as \
"yesterday" or "next week".

Answer with JSON only, no prose: {{"memories": [{{"type": one of \
{", ".join(t.value for t in MemoryType)}, "key": "...", "content": "...", "why": "...", \
"how_to_apply": "...", "confidence": 0.0, "sources": ["<message id>"]}}]}}. If nothing \
is worth remembering, answer {{"memories": []}}."""


def memory_schema() -> dict[str, Any]:
    """JSON schema of the answer (strict: every field required, nothing else allowed)."""
    item = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": [t.value for t in MemoryType]},
            "key": {"type": "string"},
            "content": {"type": "string"},
            "why": {"type": "string"},
            "how_to_apply": {"type": "string"},
            "confidence": {"type": "number"},
            "sources": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["type", "key", "content", "why", "how_to_apply", "confidence", "sources"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"memories": {"type": "array", "items": item}},
        "required": ["memories"],
        "additionalProperties": False,
    }


def response_format() -> dict[str, Any]:
    """The ``response_format`` asking a provider for :func:`memory_schema` output."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "memories", "schema": memory_schema(), "strict": True},
    }


def build_prompt(transcript: Sequence[str], existing: Sequence[Memory]) -> list[dict[str, str]]:
    """Chat messages for one extraction call."""
    known = [{"type": m.type.value, "key": m.key, "content": m.content} for m in existing]
    user = (
        "Existing memories (JSON):\n"
        f"{json.dumps(known, ensure_ascii=False)}\n\n"
        "Conversation:\n" + "\n".join(transcript)
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def render_transcript(messages: Sequence[Message]) -> list[str]:
    """One line per user, assistant or tool message with text; system messages left out.
    A message with an id or a time (``metadata``) is labelled with them."""
    lines: list[str] = []
    for message in messages:
        text = message.content.strip()
        if not text or message.role == Role.SYSTEM:
            continue
        if message.role == Role.TOOL:
            name = f" {message.name}" if message.name else ""
            lines.append(f"Tool result{name}{label(message)}: {text[:MAX_TOOL_CHARS]}")
        else:
            lines.append(f"{message.role.value.capitalize()}{label(message)}: {text}")
    return lines


def label(message: Message) -> str:
    """`` (id m3, Mon 8 May 2023 13:56 UTC)``: what is known of a message's id and time."""
    parts = []
    if (mid := message_id(message)) is not None:
        parts.append(f"id {mid}")
    try:
        when = stated_time(message.metadata)
    except ValueError:
        when = None
    if when is not None:
        parts.append(datetime.fromtimestamp(when, UTC).strftime("%a %-d %b %Y %H:%M UTC"))
    return f" ({', '.join(parts)})" if parts else ""


def trim_transcript(lines: Sequence[str], budget: int, count: TokenCounter) -> list[str]:
    """The most recent ``lines`` that fit in ``budget`` tokens, oldest first.

    A most recent line that alone is over budget is cut to fit; lines left out are
    marked with :data:`OMITTED`.
    """
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = count(line)
        if used + cost > budget:
            if not kept:
                kept.append(_cut(line, budget, count))
            break
        kept.append(line)
        used += cost
    kept.reverse()
    return [OMITTED, *kept] if len(kept) < len(lines) or _was_cut(kept, lines) else kept


def _cut(line: str, budget: int, count: TokenCounter) -> str:
    cut = line
    while cut and count(cut) > budget:
        cut = cut[: len(cut) // 2]
    return cut


def _was_cut(kept: Sequence[str], lines: Sequence[str]) -> bool:
    return bool(kept) and bool(lines) and kept[-1] != lines[-1]
