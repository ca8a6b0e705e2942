"""Signed envelopes through real workers: a forgery written straight to the broker is a
dead letter, the genuine events around it apply in order."""

from __future__ import annotations

import time

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.support.pg import dead_reason
from tulip_memory.messages import Message, Role
from tulip_ops.dev.embedded import run_async
from tulip_wire.events import encode, namespace_key, session_ended
from tulip_wire.routing import ShardRouter
from tulip_wire.signing import forged_event_id
from tulip_workers.deadletters import UNKNOWN_TENANT

KEY = "s" * 48


def said(text: str) -> list[Message]:
    return [Message(role=Role.USER, content=text)]


def test_a_forged_event_on_the_broker_is_refused_and_the_victims_events_apply(
    pipeline: Pipeline,
) -> None:
    victim = ("acme", "users", "victim")
    pipeline.start_shard(
        ShardRouter("memory.extract", SHARDS).shard(namespace_key(victim)),
        TULIP_EVENT_SIGNING_KEY=KEY,
    )
    signed = pipeline.producer(KEY)
    # Any broker client can write a well-formed task message: here one with the
    # victim's key and a sequence number that would fence out every later event.
    forged = session_ended(victim, "t", said("My favourite colour is red."), ts=time.time())
    body = encode(forged.with_seq(10**15))
    with signed, pipeline.producer() as unsigned:
        first = signed.session_ended(victim, "t", said("My favourite colour is green."))
        unsigned.republish(body)
        later = signed.session_ended(victim, "t", said("Actually, my favourite colour is amber."))
    forgery = forged_event_id(body)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, [first, later], tenant="acme")
        pipeline.wait_applied(reader, [forgery], tenant=UNKNOWN_TENANT)
        states = [reader.status(e, tenant="acme").state for e in (first, later)]
        assert states == ["applied", "applied"]
        assert reader.status(forgery, tenant=UNKNOWN_TENANT).state == "dead"
        assert "unsigned event refused" in run_async(dead_reason(pipeline.admin_url, forgery))
        found = {m.key: m.content for m in reader.recall(victim, None)}
    assert "amber" in found.get("favourite-colour", "") and "red" not in str(found)
