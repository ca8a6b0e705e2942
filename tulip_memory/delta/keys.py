"""Storage keys: where a thread's head, history and name live, safe for any thread id.

Layout, relative to a storage's root (an S3 bucket + prefix, a directory)::

    heads/<hh>/<seg>                          head: manifest + latest state (one GET)
    log/<hh>/<seg>/<level>/<first>-<last>-<nonce>   immutable history objects
    names/<hh>/<seg>                          the thread id, only for hashed segments
    summaries/<hh>/<seg>                      its background summary (tulip_memory.summaries)

Threads of a tenant (the pipeline's thread state, keyed by (tenant, thread id)) have
the same layout with the tenant right after the kind: ``heads/t.<tseg>/<hh>/<seg>``,
``log/t.<tseg>/<hh>/<seg>/...``, ``names/t.<tseg>/...``, ``summaries/t.<tseg>/...``
(:func:`scoped_key`), ``tseg`` being the tenant's segment by the same escape. The
escape never yields ``/`` and ``t.`` is never two hex digits, so the mapping is
injective: two tenants never share a key or a listing prefix, nor a tenant the seed's
own root layout; and bucket lifecycle rules by kind (``heads/``, ``log/``) still cover
every tenant.

``hh`` is two hex digits of the id's BLAKE2b hash, spreading threads over 256 prefixes.
``seg`` is a reversible escape of the id's UTF-8 bytes: ``a-z 0-9 _ -`` stay, every
other byte becomes ``.XX`` (uppercase letters too, so case-insensitive file systems
never merge two threads). No segment can be ``.``, ``..`` or contain ``/``; every key
is plain ASCII. An id whose escape exceeds :data:`MAX_SEGMENT` characters is named
``._<32 hex digits of its hash>`` instead, with the id itself in ``names/``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tulip_memory.delta.errors import InvalidThreadIdError
from tulip_memory.store.validation import validate_namespace

HEADS = "heads/"
TENANT_MARK = "t."
LOG = "log/"
NAMES = "names/"
SUMMARIES = "summaries/"  # a thread's background summary (tulip_memory.summaries)
MAX_SEGMENT = 180
MAX_THREAD_ID = 65536
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_HASHED = "._"
_SEGMENT = re.compile(r"(?:[a-z0-9_-]|\.[0-9A-F]{2})+|\._[0-9a-f]{32}")


def check_thread_id(thread_id: object) -> str:
    """``thread_id`` if it can name a thread, else :class:`InvalidThreadIdError`."""
    if not isinstance(thread_id, str):
        raise InvalidThreadIdError(thread_id, f"must be a str, not {type(thread_id).__name__}")
    if not thread_id:
        raise InvalidThreadIdError(thread_id, "must not be empty")
    if len(thread_id) > MAX_THREAD_ID:
        raise InvalidThreadIdError(thread_id, f"longer than {MAX_THREAD_ID} characters")
    return thread_id


def _utf8(thread_id: str) -> bytes:
    return thread_id.encode("utf-8", "surrogatepass")


def escape(thread_id: str) -> str:
    """The reversible escape of ``thread_id`` (may be long)."""
    return "".join(chr(b) if b in _PLAIN else f".{b:02X}" for b in _utf8(thread_id))


def unescape(segment: str) -> str | None:
    """The thread id of a key segment, or None for a hashed segment."""
    if segment.startswith(_HASHED):
        return None
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == ".":
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(segment[i]))
            i += 1
    return out.decode("utf-8", "surrogatepass")


def is_segment(segment: str) -> bool:
    """Whether ``segment`` is one :func:`segment` can produce."""
    return _SEGMENT.fullmatch(segment) is not None


def segment(thread_id: str) -> str:
    """The key segment naming ``thread_id``."""
    escaped = escape(thread_id)
    if len(escaped) <= MAX_SEGMENT:
        return escaped
    return _HASHED + hashlib.blake2b(_utf8(thread_id), digest_size=16).hexdigest()


def spread(thread_id: str) -> str:
    """Two hex digits that spread threads over prefixes."""
    return hashlib.blake2b(_utf8(thread_id), digest_size=8).hexdigest()[:2]


@dataclass(frozen=True)
class ThreadKeys:
    """The keys of one thread."""

    thread_id: str
    part: str  # "<hh>/<seg>"

    @classmethod
    def of(cls, thread_id: str) -> ThreadKeys:
        tid = check_thread_id(thread_id)
        return cls(thread_id=tid, part=f"{spread(tid)}/{segment(tid)}")

    @property
    def head(self) -> str:
        return HEADS + self.part

    @property
    def log_prefix(self) -> str:
        return f"{LOG}{self.part}/"

    @property
    def name(self) -> str | None:
        """Key of the name object, for hashed segments only."""
        return NAMES + self.part if self.part.split("/", 1)[1].startswith(_HASHED) else None

    def log(self, object_name: str) -> str:
        return self.log_prefix + object_name


def head_key_thread(key: str) -> tuple[str | None, str | None]:
    """For a head key: (thread id or None if hashed, its name key); (None, None) if not one."""
    if not key.startswith(HEADS):
        return None, None
    parts = key[len(HEADS) :].split("/")
    if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{2}", parts[0]) or not is_segment(parts[1]):
        return None, None
    tid = unescape(parts[1])
    return tid, (None if tid is not None else NAMES + "/".join(parts))


def tenant_part(tenant: str) -> str:
    """``t.<segment>``: the component naming ``tenant`` in its keys. A tenant is a
    namespace's first part (non-empty, no ``\\x1f``, no NUL), checked here."""
    (checked,) = validate_namespace((tenant,))
    return TENANT_MARK + segment(checked)


def scoped_key(part: str, key: str) -> str:
    """``key`` of the root layout (or a listing prefix with its kind) moved into the
    tenant of ``part``: ``<kind>/<part>/<rest>``."""
    kind, sep, rest = key.partition("/")
    if not sep or not kind:
        raise ValueError(f"not a key or prefix of the layout (no kind): {key!r}")
    return f"{kind}/{part}/{rest}"


def unscoped_key(part: str, key: str) -> str:
    """The root-layout key of a key :func:`scoped_key` made with ``part``."""
    kind, _, rest = key.partition("/")
    return f"{kind}/{rest.removeprefix(part + '/')}"
