"""Erase events: what a ``memory.forget`` or ``thread.forget`` payload holds, and the
subject it names.

An erase is an ordinary event of its subject's ordering key, so it takes its place in
that key's order like any other: a namespace's erase (``scope`` ``namespace`` or
``messages``) is keyed by the namespace, a thread's by the tenant and thread, a
tenant's by the tenant (``namespace_key((tenant,))``). Payloads::

    {"tenant": "acme", "scope": "namespace", "namespace": ["acme", "users", "u1"]}
    {"tenant": "acme", "scope": "messages", "namespace": [...], "message_ids": ["m1"]}
    {"tenant": "acme", "scope": "tenant"}
    {"tenant": "acme", "thread_id": "t-7"}                      # thread.forget

Workers record an erase as a tombstone holding the :func:`subject_digest` of its key,
never the key itself (a namespace names a user), and the erase's time: an event of the
subject stamped (``ts``) at or before it and delivered after it (a producer's spool, a
dead-letter replay) is dropped, not applied. This module imports nothing of the
envelope's (``tulip_wire.events`` calls it), so it reports problems as text.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tulip_memory.store.validation import NS_SEP, validate_namespace

NAMESPACE, MESSAGES, TENANT = "namespace", "messages", "tenant"
#: A thread erase's scope (its own event type, on a checkpoint shard).
THREAD = "thread"
SCOPES = frozenset({NAMESPACE, MESSAGES, TENANT})
#: The most message ids one ``forget_messages`` names (its event stays small).
MAX_MESSAGE_IDS = 10_000
MAX_MESSAGE_ID_CHARS = 512


def subject_digest(key: str) -> str:
    """What a tombstone keeps of an ordering key: a SHA-256 of it, hex."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def subject_key(payload: dict[str, Any]) -> str:
    """The ordering key of a (checked) ``memory.forget`` payload."""
    if payload["scope"] == TENANT:
        return str(payload["tenant"])
    return NS_SEP.join(payload["namespace"])


def marker_value(event_id: str, cutoff: float) -> str:
    """What :func:`~tulip_wire.topology.forgetting_key` holds: the erase and its time."""
    return f"{event_id} {cutoff!r}"


def parse_marker(raw: bytes | str | None) -> tuple[str, float] | None:
    """The erase id and cutoff of a marker, or None (absent or not one of ours)."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    event_id, _, cutoff = text.partition(" ")
    try:
        return event_id, float(cutoff)
    except ValueError:
        return None


def is_tenant_erase(kind: str, payload: Any) -> bool:
    """A ``memory.forget`` of a whole tenant."""
    return kind == "memory.forget" and isinstance(payload, dict) and payload.get("scope") == TENANT


def memory_payload(
    scope: str,
    tenant: str,
    namespace: tuple[str, ...] | None = None,
    message_ids: list[str] | None = None,
) -> dict[str, Any]:
    """A ``memory.forget`` payload (checked by the caller's :func:`problem`)."""
    payload: dict[str, Any] = {"tenant": tenant, "scope": scope}
    if namespace is not None:
        payload["namespace"] = list(namespace)
    if message_ids is not None:
        payload["message_ids"] = list(message_ids)
    return payload


def problem(thread: bool, p: Any) -> str | None:
    """What is wrong with an erase payload (``thread``: a ``thread.forget``), or None."""
    if not isinstance(p, dict):
        return f"payload must be an object, got {type(p).__name__}"
    try:
        validate_namespace((p.get("tenant"),))
    except (TypeError, ValueError) as e:
        return f"payload.tenant: {e}"
    if thread:
        if set(p) != {"tenant", "thread_id"}:
            return "a thread.forget payload holds tenant and thread_id only"
        thread_id = p["thread_id"]
        if not isinstance(thread_id, str) or not thread_id or len(thread_id) > 512:
            return "payload.thread_id must be a string of 1..512 characters"
        return None if "\x00" not in thread_id else "payload.thread_id contains a NUL character"
    scope = p.get("scope")
    if scope not in SCOPES:
        return f"payload.scope must be one of {sorted(SCOPES)}, got {scope!r}"
    if scope == TENANT:
        return None if set(p) == {"tenant", "scope"} else "a tenant erase names the tenant only"
    return _namespace_problem(scope, p)


def _namespace_problem(scope: str, p: dict[str, Any]) -> str | None:
    allowed = {"tenant", "scope", "namespace"} | ({"message_ids"} if scope == MESSAGES else set())
    if set(p) != allowed:
        return f"a {scope} erase holds exactly {sorted(allowed)}"
    ns = p["namespace"]
    if not isinstance(ns, list):
        return "payload.namespace must be a list of strings"
    try:
        validate_namespace(tuple(ns))
    except (TypeError, ValueError) as e:
        return f"payload.namespace: {e}"
    if ns[0] != p["tenant"]:
        return "payload.namespace must start with payload.tenant"
    if scope == MESSAGES:
        ids = p["message_ids"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_MESSAGE_IDS:
            return f"payload.message_ids must be a list of 1..{MAX_MESSAGE_IDS} ids"
        for i in ids:
            if not isinstance(i, str) or not i or len(i) > MAX_MESSAGE_ID_CHARS or "\x00" in i:
                return "payload.message_ids holds an id that is not 1..512 characters of text"
    return None
