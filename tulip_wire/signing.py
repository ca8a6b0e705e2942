"""Envelopes signed by the producers, verified by the workers (``TULIP_EVENT_SIGNING_KEY``).

Anyone who can write to the broker can write a task message; with a signing key set,
a worker applies only events a producer holding the key signed. The signature is
HMAC-SHA256 over the canonical JSON (sorted keys, no spaces, ASCII) of everything a
worker acts on: schema version, id, type, key, seq, ts and the payload or the
payload reference (whose sha256 pins the claim-checked bytes). It travels as the
envelope's ``sig`` (64 hex digits). A worker with a key refuses an unsigned event or a
bad signature with a dead letter whose reason says so.

The same keys sign everything else a reader or worker acts on, each kind under its own
domain (a prefix of the MAC'd bytes), so a signature of one kind never passes for
another: a thread's pending entries (:mod:`tulip_wire.pending`) and the unordered tasks
(:mod:`tulip_wire.tasksig`).

``TULIP_EVENT_SIGNING_KEY`` may list several keys separated by commas, for rotation:
the first signs, any verifies (add the new key second everywhere, then move it first,
then drop the old one). Each key must be at least :data:`MIN_KEY_CHARS` characters.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tulip_wire.env import EVENT_SIGNING_KEY
from tulip_wire.events import Envelope, EventError

ENV_VAR = EVENT_SIGNING_KEY.name
MIN_KEY_CHARS = 32
_DOMAIN = b"tulip-event-v1\n"
#: The domains of the other signed inputs (see the module docstring).
PENDING_DOMAIN = b"tulip-pending-v1\n"
TASK_DOMAIN = b"tulip-task-v1\n"
SIG_CHARS = 2 * hashlib.sha256().digest_size
_SIGNED = ("v", "id", "type", "key", "seq", "ts", "payload", "payload_ref")
#: How many characters a signature adds to an encoded envelope (``,"sig":"<hex>"``).
SIG_ROOM = len(',"sig":""') + SIG_CHARS


class ForgedEvent(EventError):
    """An event a signing worker refuses: unsigned, or not signed by a key it holds.

    Its id is not to be trusted either: a forger may reuse a genuine event's id, so it
    must not name a ledger row (:func:`forged_event_id` names its dead letter)."""


def forged_event_id(body: object) -> str:
    """The id a refused forgery is recorded under: a digest of its body, never the id
    it claims, so the genuine event of that id still applies later."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    data = body if isinstance(body, bytes) else repr(body).encode("utf-8", "backslashreplace")
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass(frozen=True)
class Signer:
    """Signs with the first key, verifies with any (never printed: ``repr`` hides them)."""

    keys: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError(f"{ENV_VAR}: no key given")
        if any(len(k) < MIN_KEY_CHARS for k in self.keys):
            raise ValueError(f"{ENV_VAR}: every key must be at least {MIN_KEY_CHARS} characters")

    def __repr__(self) -> str:
        return f"Signer(<{len(self.keys)} key(s)>)"

    def sign(self, env: Envelope) -> Envelope:
        """``env`` with its signature (over its wire form, as a worker will read it)."""
        wire = json.loads(json.dumps(env.to_dict(), ensure_ascii=False, allow_nan=False))
        return replace(env, sig=self.tag(_DOMAIN, _signed_text(wire)))

    def tag(self, domain: bytes, message: bytes) -> str:
        """The signature of ``message`` in ``domain`` (one of this module's), by the first key."""
        return hmac.new(self.keys[0], domain + message, hashlib.sha256).hexdigest()

    def checks(self, domain: bytes, message: bytes, sig: object) -> bool:
        """Whether any key signed ``message`` in ``domain`` as ``sig``."""
        if not isinstance(sig, str) or len(sig) != SIG_CHARS:
            return False
        return any(
            hmac.compare_digest(hmac.new(k, domain + message, hashlib.sha256).hexdigest(), sig)
            for k in self.keys
        )

    def verify(self, env: Envelope) -> None:
        """Nothing if a key signed ``env``; :class:`ForgedEvent` saying why not otherwise."""
        if env.sig is None:
            raise ForgedEvent(f"unsigned event refused ({ENV_VAR} is set on this worker)", env.id)
        if not self.checks(_DOMAIN, _signed_text(env.to_dict()), env.sig):
            raise ForgedEvent(
                "bad signature: the event was not signed with this deployment's "
                f"{ENV_VAR} or was changed after signing",
                env.id,
            )


def signer_of(keys: str | None) -> Signer | None:
    """The signer of a ``TULIP_EVENT_SIGNING_KEY`` value (comma-separated keys, the
    first signs), or None when it is unset or empty."""
    parts = tuple(k.strip().encode("utf-8") for k in (keys or "").split(",") if k.strip())
    return Signer(parts) if parts else None


def _signed_text(wire: Mapping[str, Any]) -> bytes:
    signed = {name: wire.get(name) for name in _SIGNED}
    return json.dumps(signed, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
