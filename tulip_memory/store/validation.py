"""Input checks shared by every store backend.

Each check raises ``TypeError``/``ValueError`` naming what is wrong, before anything
is written, so a bad call never leaves a half-written batch behind.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Joins namespace parts into one string for storage; a part may not contain it.
NS_SEP = "\x1f"
MAX_KEY_BYTES = 1024
#: The longest search query accepted, in characters: a long pasted message fits
#: (about 8,000 tokens, past what embedding models read), a megabyte of text does not
#: (Postgres refuses a ``tsvector`` over 1 MB, and the embedder would be sent it all).
MAX_QUERY_CHARS = 32_768
#: A query's lexical side keeps its first this many distinct terms, so its cost is
#: bounded whatever the text: each term is an index read on every backend.
MAX_QUERY_TERMS = 64

#: What Postgres text cannot hold: NUL, and lone UTF-16 surrogates (UTF-8 has none;
#: JSON's ``\u0000`` and ``\ud800`` escapes decode to them).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

Namespace = tuple[str, ...]


def validate_namespace(namespace: Any) -> Namespace:
    """Return ``namespace`` as a tuple of non-empty strings, or raise."""
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise TypeError(
            f"namespace must be a tuple of strings, got {type(namespace).__name__}: {namespace!r}"
        )
    if not namespace:
        raise ValueError("namespace must have at least one part (namespace[0] is the tenant)")
    for i, part in enumerate(namespace):
        if not isinstance(part, str):
            raise TypeError(f"namespace[{i}] must be a str, got {type(part).__name__}: {part!r}")
        if not part:
            raise ValueError(f"namespace[{i}] is empty in {tuple(namespace)!r}")
        if NS_SEP in part:
            raise ValueError(f"namespace[{i}] contains the namespace separator \\x1f: {part!r}")
        if "\x00" in part:
            raise ValueError(f"namespace[{i}] contains a NUL character: {part!r}")
    return tuple(namespace)


def validate_key(key: Any) -> str:
    """Return ``key`` if it is a usable key, or raise."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}: {key!r}")
    if not key:
        raise ValueError("key must not be empty")
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise ValueError(
            f"key is {size} bytes, over the {MAX_KEY_BYTES}-byte limit: {key[:40]!r}..."
        )
    if "\x00" in key:
        raise ValueError(f"key contains a NUL character: {key!r}")
    return key


def validate_query(query: Any) -> str | None:
    """Return ``query`` (``None`` or a string of at most :data:`MAX_QUERY_CHARS`
    characters), or raise naming what is wrong; never quoting it (a query is a user's
    words, and an error's text reaches logs)."""
    if query is None or isinstance(query, str):
        if query is not None and len(query) > MAX_QUERY_CHARS:
            raise ValueError(
                f"query is {len(query)} characters, over the {MAX_QUERY_CHARS}-character limit"
            )
        return query
    raise TypeError(f"query must be a str or None, got {type(query).__name__}")


def validate_limit(limit: Any, name: str = "limit") -> int:
    """``limit`` (``top_k``) as an int, at least 0: a bound under 1 finds nothing, as
    the seed's turn memory answers ``top_k <= 0`` (a negative one was Postgres's
    ``LIMIT must not be negative`` on one backend and every key but the last on
    another). A bool, a float or a string is a ``TypeError``."""
    if isinstance(limit, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        return max(0, operator.index(limit))
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(limit).__name__}") from None


def validate_threshold(threshold: Any) -> float | None:
    """Return ``threshold`` (a similarity floor) as a float, or ``None``; a value that
    is not a real number, or not finite, is refused (NaN would keep every result on
    one backend and none on another)."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise TypeError(f"threshold must be a number or None, got {type(threshold).__name__}")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    return float(threshold)


def encode_json(value: Any, what: str) -> str:
    """Serialize ``value`` to JSON text that Postgres ``jsonb`` also accepts."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} is not JSON-serializable: {e}") from e
    if "\\u0000" in text:
        raise ValueError(f"{what} contains a NUL character (\\u0000), which jsonb cannot store")
    return _utf8(text, what)


def _utf8(text: str, what: str) -> str:
    """``text`` if UTF-8 can carry it, or a ``ValueError`` saying where it cannot (a
    lone UTF-16 surrogate, which JSON's ``\\ud800`` escapes decode to), never quoting
    it: the driver's own error would quote the whole value."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{what} holds a lone UTF-16 surrogate at character {e.start}, which UTF-8 "
            "(and so Postgres text) cannot carry"
        ) from None
    return text


def validate_metadata(metadata: Any) -> dict[str, Any]:
    """Return ``metadata`` (``None`` becomes ``{}``) if it is a JSON object, or raise."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict or None, got {type(metadata).__name__}")
    encode_json(metadata, "metadata")
    return metadata


def validate_vector(vector: Any, dimension: int, what: str = "embedding") -> list[float]:
    """Return ``vector`` as floats if it has ``dimension`` finite entries, or raise."""
    if isinstance(vector, str | bytes) or not hasattr(vector, "__len__"):
        raise TypeError(f"{what} must be a sequence of floats, got {type(vector).__name__}")
    if len(vector) != dimension:
        raise ValueError(f"{what} has {len(vector)} dimensions, expected {dimension}")
    try:
        out = [float(x) for x in vector]
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must contain only numbers: {e}") from e
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"{what} contains NaN or infinity")
    return out


@dataclass(frozen=True)
class ValidWrite:
    """One write every backend accepts: checked, serialized, and its search text."""

    namespace: Namespace
    key: str
    value_json: str
    metadata_json: str
    content: str


@dataclass(frozen=True)
class Indexed:
    """A value to store with the text it is searched by, when that is not all of its
    text (``""``: found by no query): LangGraph's ``index=False`` or ``index=[fields]``
    (:mod:`tulip_memory.langgraph.store`). Every backend stores ``value`` itself."""

    value: Any
    text: str


def validate_write(namespace: Any, key: Any, value: Any, metadata: Any) -> ValidWrite:
    """Check a ``put``'s arguments, or raise naming what is wrong (nothing written)."""
    ns = validate_namespace(namespace)
    k = validate_key(key)
    md = validate_metadata(metadata)
    if isinstance(value, Indexed):
        if not isinstance(value.text, str):
            raise TypeError(f"indexed text must be a str, got {type(value.text).__name__}")
        text = value.text
        value_json = encode_json(value.value, "value")
        return ValidWrite(ns, k, value_json, encode_json(md, "metadata"), text)
    value_json = encode_json(value, "value")
    return ValidWrite(ns, k, value_json, encode_json(md, "metadata"), content_of(value))


def content_of(value: Any) -> str:
    """The text a value is searched by: the string itself, or its string leaves."""
    if isinstance(value, str):
        return value
    parts: list[str] = []
    _collect_text(value, parts)
    return " ".join(parts)


def _collect_text(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_text(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect_text(v, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))
