"""``decode``: whatever arrives from the broker is an event or an ``EventError``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tulip_memory.messages import Message, Role
from tulip_wire.events import SEQ_ROOM, Encoded, EventError, decode, encode, session_ended
from tulip_wire.signing import SIG_ROOM, signer_of


def valid(text: str = "My favourite colour is red.") -> str:
    msgs = [Message(role=Role.USER, content=text)]
    return encode(session_ended(("acme", "u1"), "t", msgs, ts=time.time()).with_seq(1))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (123, "must be JSON text, got int"),
        (None, "must be JSON text, got NoneType"),
        (["a"], "must be JSON text, got list"),
        ("[" * 100_000 + "]" * 100_000, "RecursionError"),
        ('{"v": 1, "id": "a\x00"}', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        ("{" + '"v": 1' + "}\ud83d", "lone surrogate"),
        (valid().replace("red", "\\ud83d"), "lone UTF-16 surrogate"),
        (valid().replace("red", "\\u0000"), "NUL character"),
        (valid() + " " * 300, "over the 300 of TULIP_MAX_EVENT_BYTES"),
    ],
)
def test_any_bad_body_is_an_event_error(body: Any, reason: str) -> None:
    with pytest.raises(EventError, match=reason):
        decode(body, max_bytes=300 if isinstance(body, str) and body.endswith(" ") else None)


def test_a_valid_surrogate_pair_and_a_literal_backslash_u_are_fine() -> None:
    pair = json.loads(valid())
    pair["payload"]["messages"][0]["content"] = "\U0001f600 and a literal \\u0000"
    text = json.dumps(pair, ensure_ascii=True)  # the emoji as an escaped surrogate pair
    assert decode(text).payload is not None


@pytest.mark.parametrize(
    "namespace",
    [("acme", "u1"), ("acme", 'x", "seq": null'), ("acme", 'seq": null, "'), ("acme", "seq")],
)
def test_an_encoding_numbered_later_is_the_encoding_of_the_numbered_event(
    namespace: tuple[str, ...],
) -> None:
    """Encoded cuts at the envelope's own seq, whatever the key or the payload hold."""
    msgs = [Message(role=Role.USER, content='"seq": null')]
    env = session_ended(namespace, "t", msgs, {"seq": None, '"seq"': None}, ts=1.5)
    encoded = Encoded.of(env.with_seq(3))
    assert encoded.text == encode(env) and encoded.env == env
    for seq in (1, 2**63 - 1):
        assert encoded.numbered(seq) == encode(env.with_seq(seq))
        assert decode(encoded.numbered(seq)) == env.with_seq(seq)
    assert len(encoded.numbered(2**63 - 1)) == len(encoded.text) + SEQ_ROOM


def test_a_signature_takes_the_room_the_size_check_leaves_for_it() -> None:
    env = session_ended(("acme", "u1"), "t", [], ts=1.5).with_seq(7)
    signed = signer_of("k" * 32)
    assert signed is not None
    assert len(encode(signed.sign(env))) == len(encode(env)) + SIG_ROOM
