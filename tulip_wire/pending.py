"""Read your writes: a thread's newest states wait in Redis until they are durable.

``Producer.checkpoint_saved`` appends each save here in the same round trip that
gives the event its sequence number, so ``Reader.load`` returns it at once, before
any worker ran. A save is appended as the producer sends it: the whole state, or a
delta (:mod:`~tulip_wire.statedelta`) onto a base checkpoint with the digest of the
state it makes. A reader rebuilds a checkpoint by following bases back through the
list to a whole state, or to a base no longer in the list, which is then durable
(the worker trims only what the checkpoint store has) and loaded from the store.

The checkpoint worker trims the list after the store has a checkpoint: that entry
and every one before it (one Lua script), so later saves stay. A pending list expires
only after a generous TTL (refreshed by every save), and by then its events have long
been written: it is never the only copy of anything older than the newest save.

Keys are per (tenant, thread id): ``tulip:pending-log:<tenant>\\x1f<thread id>``
(:func:`~tulip_wire.events.thread_key`, injective: a tenant holds no ``\\x1f``), so
the same thread id in two tenants is two lists.

Entry layout: ``<checkpoint id: 32 hex><base: 32 hex, or 32 "-" for a whole state>
<digest: 16 hex>[<signature: 64 hex>]`` ``\\n`` ``<JSON of the state or of the patch>``,
so the trim never parses a state.

Any client of this Redis can write the list. With ``TULIP_EVENT_SIGNING_KEY`` set, the
producer signs each entry (HMAC in the pending domain of :mod:`tulip_wire.signing`, over
the tenant, thread id, checkpoint id, base, digest and body: an entry moved to another
thread does not verify), and a reader or worker holding the key drops any entry that
does not verify (logged by checkpoint id, never with its content) before it builds a
chain. Whatever the signing, :func:`rebuild` checks the state it makes against the
digest its newest entry carries, and the checkpoint worker holds that digest equal to
its signed event's: a chain rooted in a whole entry is checked like any other.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_memory.delta.codec import digest as bytes_digest
from tulip_memory.delta.diff import apply_owned
from tulip_wire.endpoints import REDIS_SCHEMES, redis_client, scheme_of
from tulip_wire.events import thread_key
from tulip_wire.scripts import lua
from tulip_wire.signing import ENV_VAR, PENDING_DOMAIN, SIG_CHARS, Signer
from tulip_wire.statedelta import DeltaError, apply_delta, digest_of
from tulip_wire.topology import pending_key

log = logging.getLogger(__name__)

_TRIM = lua(__file__, "pending_trim.lua")
_NO_BASE = "-" * 32
_HEADER = 32 + 32 + 16
_SIGNED_HEADER = _HEADER + SIG_CHARS
_HEAD = re.compile(rb"[0-9a-f]{32}(?:[0-9a-f]{32}|-{32})[0-9a-f]{16}(?:[0-9a-f]{64})?")


@dataclass(frozen=True)
class PendingState:
    checkpoint_id: str
    state: dict[str, Any]


@dataclass(frozen=True)
class PendingEntry:
    """One save in the list: a whole state (``base`` None) or a patch onto ``base``."""

    checkpoint_id: str
    base: str | None
    digest: str
    body: bytes
    #: The producer's signature (:func:`sealed`), None for an unsigned entry.
    sig: str | None = None

    def value(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, signer: Signer, tenant: str, thread_id: str) -> bool:
        """Whether ``signer``'s keys signed this entry for ``tenant``'s thread."""
        message = _signed(tenant, thread_id, self.checkpoint_id, self.base, self.digest)
        return signer.checks(PENDING_DOMAIN, message + self.body, self.sig)


@dataclass(frozen=True)
class Chain:
    """What rebuilds a checkpoint: ``root`` (a base to load from the store, or None
    when ``steps[0]`` is a whole state), then ``steps`` applied in order."""

    root: str | None
    steps: tuple[PendingEntry, ...]

    @property
    def checkpoint_id(self) -> str:
        return self.steps[-1].checkpoint_id


def entry_text(checkpoint_id: str, base: str | None, digest: str, body: str) -> str:
    """One unsigned list entry: ``body`` is the JSON of the state, or of the patch onto
    ``base`` (:func:`sealed` signs one)."""
    return f"{checkpoint_id}{base or _NO_BASE}{digest}\n{body}"


def sealed(
    signer: Signer | None,
    tenant: str,
    thread_id: str,
    checkpoint_id: str,
    base: str | None,
    digest: str,
    body: str,
) -> str:
    """The list entry of a save, signed for ``tenant``'s thread when there is a signer."""
    if signer is None:
        return entry_text(checkpoint_id, base, digest, body)
    message = _signed(tenant, thread_id, checkpoint_id, base, digest)
    sig = signer.tag(PENDING_DOMAIN, message + body.encode("utf-8", "surrogatepass"))
    return f"{checkpoint_id}{base or _NO_BASE}{digest}{sig}\n{body}"


def _signed(
    tenant: str, thread_id: str, checkpoint_id: str, base: str | None, digest: str
) -> bytes:
    """What an entry's signature covers before its body: every field, unambiguously
    (a JSON list of strings holds no raw newline)."""
    head = json.dumps([tenant, thread_id, checkpoint_id, base or "", digest], ensure_ascii=True)
    return head.encode("ascii") + b"\n"


def parse_entry(raw: bytes) -> PendingEntry | None:
    """An entry of the list, None when it is not one (a foreign or damaged value)."""
    head, sep, body = raw.partition(b"\n")
    if not sep or len(head) not in (_HEADER, _SIGNED_HEADER) or not _HEAD.fullmatch(head):
        return None
    text = head.decode("ascii")
    base = text[32:64]
    sig = text[_HEADER:] or None
    return PendingEntry(text[:32], None if base == _NO_BASE else base, text[64:_HEADER], body, sig)


def chain_of(entries: Sequence[PendingEntry], checkpoint_id: str | None = None) -> Chain | None:
    """The chain of ``checkpoint_id`` (the newest entry if None), None if it is not listed.

    Bases are followed back only to earlier entries, so a damaged list cannot loop.
    """
    where = {e.checkpoint_id: i for i, e in enumerate(entries)}
    if not entries:
        return None
    i = len(entries) - 1 if checkpoint_id is None else where.get(checkpoint_id)
    if i is None:
        return None
    steps: list[PendingEntry] = []
    while True:
        entry = entries[i]
        steps.append(entry)
        if entry.base is None:
            return Chain(None, tuple(reversed(steps)))
        j = where.get(entry.base)
        if j is None or j >= i:
            return Chain(entry.base, tuple(reversed(steps)))
        i = j


def rebuild(chain: Chain, base: dict[str, Any] | None) -> dict[str, Any]:
    """The state ``chain`` makes of ``base`` (the root's state; None for a chain that
    starts whole), checked against the digest of its newest entry whatever the root;
    :class:`DeltaError` naming the base when a step does not fit or the state does not
    match."""
    state: dict[str, Any] | None = None if base is None else dict(base)
    owned: set[str] = set()  # lists copied once, then extended in place: n tails cost n
    last_base = chain.root or ""
    for step in chain.steps:
        if step.base is None:
            state = step.value()
            owned.clear()
            if not isinstance(state, dict):
                raise DeltaError(f"pending checkpoint {step.checkpoint_id} is not an object")
        elif state is None:
            raise DeltaError(f"the base checkpoint {step.base} of a pending delta is unknown")
        else:
            state = _applied(state, step, owned)
            last_base = step.base
    assert state is not None
    last = chain.steps[-1]
    # A whole entry is canonical JSON as the producer writes it: its bytes' digest is
    # the state's, and only those bytes have it; any other spelling is encoded again.
    if last.base is None and bytes_digest(last.body) == last.digest:
        return state
    got = digest_of(state)
    if got != last.digest:
        raise DeltaError(
            f"pending checkpoint {chain.checkpoint_id} rebuilds to digest {got}, not "
            f"{chain.steps[-1].digest} (last base {last_base})"
        )
    return state


def _applied(state: dict[str, Any], step: PendingEntry, owned: set[str]) -> dict[str, Any]:
    """One step without its digest check (the chain's end is checked once)."""
    try:
        out = apply_owned(state, step.value(), owned)
    except Exception as e:
        raise DeltaError(
            f"pending delta {step.checkpoint_id} does not apply to its base {step.base}: "
            f"{type(e).__name__}"
        ) from e
    if not isinstance(out, dict):
        raise DeltaError(f"pending delta {step.checkpoint_id} does not yield an object")
    return out


class PendingStates:
    """The overlay on one Redis client (``redis.Redis``); with a ``signer``, entries are
    appended signed and read only when they verify."""

    def __init__(self, client: Any, signer: Signer | None = None) -> None:
        self._client = client
        self._signer = signer
        self._trim = client.register_script(_TRIM)

    @staticmethod
    def key(tenant: str, thread_id: str) -> str:
        return _key(tenant, thread_id)

    @staticmethod
    def push(pipe: Any, tenant: str, thread_id: str, text: str, ttl: float) -> None:
        """Queue the append of one entry (:func:`entry_text`) on a Redis pipeline."""
        key = _key(tenant, thread_id)
        pipe.rpush(key, text)
        pipe.pexpire(key, int(ttl * 1000))

    def append(self, tenant: str, thread_id: str, text: str, ttl: float) -> None:
        pipe = self._client.pipeline(transaction=True)
        self.push(pipe, tenant, thread_id, text, ttl)
        pipe.execute()

    def put(
        self, tenant: str, thread_id: str, checkpoint_id: str, state: dict[str, Any], ttl: float
    ) -> None:
        """Append a whole state."""
        body = json.dumps(
            state, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
        )
        text = sealed(self._signer, tenant, thread_id, checkpoint_id, None, digest_of(state), body)
        self.append(tenant, thread_id, text, ttl)

    def entries(self, tenant: str, thread_id: str) -> list[PendingEntry]:
        """The thread's entries, oldest first; with a signer, only those it verifies."""
        raws = self._client.lrange(_key(tenant, thread_id), 0, -1)
        found = [e for e in map(parse_entry, raws) if e is not None]
        if self._signer is None:
            return found
        signer = self._signer
        kept = [e for e in found if e.signed_by(signer, tenant, thread_id)]
        if len(kept) < len(found) or len(found) < len(raws):
            log.warning(
                "pending list of a thread of tenant %s: %d of %d entries dropped (unsigned, "
                "not signed by %s, or malformed): never served",
                tenant,
                len(raws) - len(kept),
                len(raws),
                ENV_VAR,
            )
        return kept

    def chain(self, tenant: str, thread_id: str, checkpoint_id: str | None = None) -> Chain | None:
        """The chain of ``checkpoint_id`` (the newest pending if None), if it is pending."""
        return chain_of(self.entries(tenant, thread_id), checkpoint_id)

    def exists(self, tenant: str, thread_id: str) -> bool:
        """Whether any save of the thread is still waiting to be durable."""
        return bool(self._client.exists(_key(tenant, thread_id)))

    def get(self, tenant: str, thread_id: str) -> PendingState | None:
        """The newest pending state when the list alone rebuilds it (else None)."""
        chain = self.chain(tenant, thread_id)
        if chain is None or chain.root is not None:
            return None
        return PendingState(chain.checkpoint_id, rebuild(chain, None))

    def clear_if(self, tenant: str, thread_id: str, checkpoint_id: str) -> bool:
        """Trim ``checkpoint_id`` (now durable) and every entry before it; True if it
        was listed."""
        return bool(self._trim(keys=[_key(tenant, thread_id)], args=[checkpoint_id]))


def apply_entry(base: dict[str, Any], entry: PendingEntry) -> dict[str, Any]:
    """One delta entry applied to its base and checked against its digest."""
    return apply_delta(base, entry.value(), entry.digest, entry.base or "")


def _key(tenant: str, thread_id: str) -> str:
    return pending_key(thread_key(tenant, thread_id))


def pending_states(redis_url: str, signer: Signer | None = None) -> PendingStates | None:
    """The overlay on ``redis_url`` (any spelling of :mod:`tulip_wire.endpoints`,
    Sentinel included), or ``None`` when that is not a Redis URL."""
    if scheme_of(redis_url) not in REDIS_SCHEMES:
        return None
    return PendingStates(redis_client(redis_url), signer)
