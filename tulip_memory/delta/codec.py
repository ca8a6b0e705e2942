"""Bytes in and out: the canonical JSON of a state, digests, and framed objects.

Pure functions, no I/O. Every stored object is a *frame*::

    b"TDC1" | kind (1 byte) | section count (1 byte) | crc32 of the rest (4 bytes)
    | per section: length (4 bytes, big-endian) | zlib-compressed bytes

so a truncated or altered object fails with :class:`CorruptCheckpointError` naming
its key, before anything is parsed.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_memory.delta.errors import CorruptCheckpointError, StateNotSerializableError

MAGIC = b"TDC1"
KIND_HEAD = b"H"
KIND_SEGMENTED_HEAD = b"G"
KIND_LOG = b"L"
_HEADER = struct.Struct(">4sccI")
#: Bytes of a state's digest (blake2b).
DIGEST_SIZE = 8
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True)
class EncodedState:
    """A state as saved: its JSON value, canonical bytes and their digest."""

    data: dict[str, Any]
    raw: bytes
    digest: str


def dumps(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8 (lone surrogates kept)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def loads(raw: bytes) -> Any:
    """Inverse of :func:`dumps`."""
    return json.loads(raw.decode("utf-8", "surrogatepass"))


def digest(raw: bytes) -> str:
    """A short digest of canonical bytes: enough to tell states apart, not a MAC."""
    return hashlib.blake2b(raw, digest_size=DIGEST_SIZE).hexdigest()


def hasher(pieces: Sequence[bytes] = ()) -> Any:
    """The hash of :func:`digest` having taken ``pieces`` (``hexdigest()``: the
    digest of the bytes they join to), to be fed more or copied."""
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    for piece in pieces:
        h.update(piece)
    return h


def object_pieces(parts: dict[str, bytes]) -> list[bytes]:
    """The canonical bytes of an object whose values' bytes are ``parts``, in pieces:
    ``{``, each key and value in key order, ``}`` (what :func:`dumps` joins)."""
    out = [b"{"]
    for i, k in enumerate(sorted(parts)):
        out += [b"," + dumps(k) + b":" if i else dumps(k) + b":", parts[k]]
    out.append(b"}")
    return out


def encode_state(data: dict[str, Any]) -> EncodedState:
    """The canonical form of ``data``, refusing what would not load back equal.

    Raises :class:`StateNotSerializableError` for values JSON cannot hold (objects,
    NaN, infinities) and for values it would change (tuples, non-string keys).
    """
    try:
        raw = json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError) as e:
        path, reason = first_problem(data, "state") or ("state", str(e))
        raise StateNotSerializableError(path, reason) from e
    parsed = loads(raw)
    if parsed != data:
        path, reason = first_problem(data, "state") or ("state", "changes through JSON")
        raise StateNotSerializableError(path, reason)
    return EncodedState(data=parsed, raw=raw, digest=digest(raw))


def first_problem(value: Any, path: str) -> tuple[str, str] | None:
    """Where and why ``value`` is not exactly JSON, or None if it is."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, f"{value!r} is not a JSON number")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return (path, f"key {k!r} is a {type(k).__name__}, JSON keys are strings")
            found = first_problem(v, f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = first_problem(v, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, tuple):
        return (path, "a tuple would load back as a list; store a list")
    return (path, f"{type(value).__name__} is not a JSON value")


def compress(raw: bytes, level: int) -> bytes:
    """zlib at ``level``."""
    return zlib.compress(raw, level)


def encode_frame(kind: bytes, sections: Sequence[bytes]) -> bytes:
    """A frame of already-compressed ``sections``."""
    body = b"".join(_LENGTH.pack(len(s)) + s for s in sections)
    return _HEADER.pack(MAGIC, kind, bytes([len(sections)]), zlib.crc32(body)) + body


def decode_frame(key: str, data: bytes, kind: bytes) -> list[bytes]:
    """The compressed sections of a frame, checked; errors name ``key``."""
    return decode_frame_of(key, data, (kind,))[1]


def decode_frame_of(key: str, data: bytes, kinds: tuple[bytes, ...]) -> tuple[bytes, list[bytes]]:
    """The kind (one of ``kinds``) and compressed sections of a frame, checked."""
    if len(data) < _HEADER.size:
        raise CorruptCheckpointError(key, f"only {len(data)} bytes (truncated)")
    magic, got_kind, count, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpointError(key, "not a tulip checkpoint object (bad magic)")
    if got_kind not in kinds:
        expected = " or ".join(repr(k) for k in kinds)
        raise CorruptCheckpointError(key, f"object kind {got_kind!r}, expected {expected}")
    body = memoryview(data)[_HEADER.size :]
    if zlib.crc32(body) != crc:
        raise CorruptCheckpointError(key, "checksum mismatch (truncated or corrupted)")
    return got_kind, _split_sections(key, body, count[0])


def _split_sections(key: str, body: memoryview, count: int) -> list[bytes]:
    sections: list[bytes] = []
    offset = 0
    for _ in range(count):
        if offset + _LENGTH.size > len(body):
            raise CorruptCheckpointError(key, "section header past the end (truncated)")
        (length,) = _LENGTH.unpack_from(body, offset)
        offset += _LENGTH.size
        if offset + length > len(body):
            raise CorruptCheckpointError(key, "section past the end (truncated)")
        sections.append(bytes(body[offset : offset + length]))
        offset += length
    if offset != len(body):
        raise CorruptCheckpointError(key, "trailing bytes after the last section")
    return sections


def decompress_json(key: str, section: bytes) -> Any:
    """The JSON value of one compressed section; errors name ``key``."""
    return decompress_json_sized(key, section)[0]


def decompress_json_sized(key: str, section: bytes) -> tuple[Any, int]:
    """The JSON value of one compressed section and its size in bytes, uncompressed."""
    try:
        raw = zlib.decompress(section)
        return loads(raw), len(raw)
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"undecodable section: {e}") from e
