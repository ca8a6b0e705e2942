"""Reading a model's answer into memories: tolerant JSON, then per-item validation.

Pure functions. The JSON may sit in code fences or prose; items that are not valid
memories are dropped with a reason, and so are unusable optional fields of a kept
item (a ``why`` over :data:`MAX_CONTENT_CHARS`, a confidence no float can hold). A
reason never quotes the model's text (it may echo the user's words): it names the
field, the kind of value and its length. Only the fields a memory has are read: anything
else in an item (a namespace, a tenant, ...) is ignored, so model output never
chooses where a memory is written. Text Postgres cannot store (a NUL or a lone
UTF-16 surrogate, which JSON's ``\\u0000`` / ``\\ud800`` escapes decode to) drops
its item when it is the content, and is left out as any unusable optional field is:
written, it would fail every attempt and make the whole event a dead letter.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from tulip_memory.manager.memory import Memory, MemoryType
from tulip_memory.store.validation import UNSTORABLE

MAX_KEY_CHARS = 120
MAX_CONTENT_CHARS = 2_000
MAX_SOURCES = 32
#: Model output longer than this is not read (a JSON list of memories is a few KB;
#: a server spewing megabytes gets a reasoned failure, not minutes of parsing).
MAX_OUTPUT_CHARS = 256 * 1024
#: Brackets in prose tried as the start of the answer's JSON: each failed attempt
#: costs a scan of the text before it, so unbounded it is quadratic in the output.
MAX_EMBEDDED_ATTEMPTS = 1_000
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_KEY_JUNK = re.compile(r"[^a-z0-9_]+")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class DroppedItem:
    """An item of model output that is not a valid memory, and why; with ``field``,
    only that field of the item was dropped (the memory was kept without it)."""

    item: Any
    reason: str
    field: str | None = None


@dataclass(frozen=True)
class ParsedItems:
    """The items found in a model's answer, or ``error`` if no JSON list was found."""

    items: tuple[Any, ...] = ()
    error: str | None = None


def parse_items(text: str) -> ParsedItems:
    """The list of memory items in ``text``: bare JSON, JSON in code fences, or the
    first JSON list (or ``{"memories": [...]}`` object) inside surrounding prose.
    Output over :data:`MAX_OUTPUT_CHARS` is an error, unread."""
    if len(text) > MAX_OUTPUT_CHARS:
        return ParsedItems(
            error=f"model output of {len(text):,} characters, over {MAX_OUTPUT_CHARS:,}: not read"
        )
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        items = _items_of(_loads(candidate))
        if items is not None:
            return ParsedItems(items=tuple(items))
    for value in _embedded_json(text):
        items = _items_of(value)
        # In prose, a list of no objects ("see [1]") is not the answer.
        if items is not None and (not items or any(isinstance(i, dict) for i in items)):
            return ParsedItems(items=tuple(items))
    # The start of the answer, for the tenant's dead letter (logs and Flower see only
    # the reason's class, length and hash).
    return ParsedItems(
        error=f"no JSON list of memories in the model output ({len(text)} characters): "
        f"{text[:200]!r}"
    )


def validate_items(
    items: Sequence[Any], *, min_confidence: float = 0.0
) -> tuple[list[Memory], list[DroppedItem]]:
    """Split ``items`` into memories and dropped items (with their reasons)."""
    memories: list[Memory] = []
    dropped: list[DroppedItem] = []
    for item in items:
        fields: dict[str, str] = {}
        result = _checked(item, min_confidence, fields)
        if isinstance(result, Memory):
            memories.append(result)
            dropped += [DroppedItem(item, why, name) for name, why in fields.items()]
        else:
            dropped.append(DroppedItem(item=item, reason=result))
    return memories, dropped


def validate_item(item: Any, *, min_confidence: float = 0.0) -> Memory | str:
    """A memory from one item (without its unusable optional fields), or the reason
    it is not one."""
    return _checked(item, min_confidence, {})


def _checked(item: Any, min_confidence: float, fields: dict[str, str]) -> Memory | str:
    """:func:`validate_item`, noting each dropped optional field's reason in ``fields``.
    Nothing an item holds raises: an error checking it drops it, named by its class."""
    try:
        return _check(item, min_confidence, fields)
    except Exception as e:  # OverflowError, RecursionError, ...: this item only
        return f"unusable item ({type(e).__name__})"


def _check(item: Any, min_confidence: float, fields: dict[str, str]) -> Memory | str:
    if not isinstance(item, Mapping):
        return f"not an object: {type(item).__name__}"
    kind = _memory_type(item.get("type"))
    if kind is None:
        return f"unknown type ({_shape(item.get('type'))})"
    key = normalize_key(item.get("key"))
    if not key:
        return f"missing or unusable key ({_shape(item.get('key'))})"
    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        return "missing content"
    if len(content) > MAX_CONTENT_CHARS:
        return f"content longer than {MAX_CONTENT_CHARS} characters"
    if UNSTORABLE.search(content):
        return "content holds a NUL or a lone surrogate, which Postgres text cannot store"
    metadata = _metadata(item, fields)
    if metadata.get("confidence", 1.0) < min_confidence:
        return f"confidence {metadata['confidence']} below {min_confidence}"
    return Memory(type=kind, key=key, content=content.strip(), metadata=metadata)


def _shape(value: Any) -> str:
    """What a value is, without what it says: its type, and its length if it has one."""
    if isinstance(value, str | list | dict):
        return f"a {type(value).__name__} of length {len(value)}"
    return "missing" if value is None else f"a {type(value).__name__}"


def normalize_key(raw: Any) -> str:
    """A store key from a model's key: lowercase ``[a-z0-9_]`` runs joined by ``-``."""
    if not isinstance(raw, str):
        return ""
    return _KEY_JUNK.sub("-", raw.lower()).strip("-")[:MAX_KEY_CHARS].strip("-")


def _memory_type(raw: Any) -> MemoryType | None:
    if not isinstance(raw, str):
        return None
    try:
        return MemoryType(raw.strip().lower())
    except ValueError:
        return None


def _metadata(item: Mapping[str, Any], dropped: dict[str, str]) -> dict[str, Any]:
    """The optional fields of a memory that are usable; the others' reasons in ``dropped``."""
    out: dict[str, Any] = {}
    for name in ("why", "how_to_apply"):
        value = item.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if not _storable(value):
            dropped[name] = f"{name}: not storable text ({_shape(value)})"
        elif len(value) > MAX_CONTENT_CHARS:
            dropped[name] = f"{name}: longer than {MAX_CONTENT_CHARS} characters"
        else:
            out[name] = value.strip()
    confidence = _confidence(item.get("confidence"))
    if isinstance(confidence, float):
        out["confidence"] = confidence
    elif confidence is not None:
        dropped["confidence"] = confidence
    sources = item.get("sources")
    if isinstance(sources, list):
        ids = [i for i in sources if _storable(i) and 0 < len(i) <= 256]
        out["source_ids"] = ids[:MAX_SOURCES]  # the worker keeps the session's own only
    return out


def _confidence(value: Any) -> float | str | None:
    """A confidence in ``[0, 1]``, the reason one is unusable, or None for none."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"confidence: not a number ({_shape(value)})"
    try:
        number = float(value)  # an int of 400 digits: OverflowError
    except OverflowError:
        return "confidence: a number too large for a float"
    if not math.isfinite(number):
        return "confidence: not a finite number"
    return min(1.0, max(0.0, number))


def _storable(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and UNSTORABLE.search(value) is None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _items_of(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        memories = value.get("memories")
        if isinstance(memories, list):
            return memories
    return None


def _embedded_json(text: str) -> Iterator[Any]:
    """Each JSON list or object that starts at one of the first
    :data:`MAX_EMBEDDED_ATTEMPTS` brackets of ``text`` and decodes."""
    for attempt, match in enumerate(re.finditer(r"[\[{]", text)):
        if attempt >= MAX_EMBEDDED_ATTEMPTS:
            return
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except ValueError:
            continue
        yield value
