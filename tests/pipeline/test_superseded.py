"""An event whose write the sequence fence skipped reports ``superseded`` through a
real worker, never ``applied`` (issue 13, part 5)."""

from __future__ import annotations

import time

from tests.pipeline.conftest import SHARDS, Pipeline
from tulip_memory.messages import Message, Role
from tulip_wire.events import encode, namespace_key, session_ended
from tulip_wire.routing import ShardRouter


def said(text: str) -> list[Message]:
    return [Message(role=Role.USER, content=text)]


def test_the_earlier_event_applied_second_reports_superseded(pipeline: Pipeline) -> None:
    ns = ("acme", "users", "late")
    pipeline.start_shard(ShardRouter("memory.extract", SHARDS).shard(namespace_key(ns)))
    now = time.time()
    earlier = session_ended(ns, "t", said("My favourite colour is red."), ts=now - 60)
    later = session_ended(ns, "t", said("My favourite colour is amber."), ts=now)
    with pipeline.producer() as producer, pipeline.reader() as reader:
        # The later-seq event reaches the worker first (a late redelivery of the
        # earlier one, or a replay): the fence keeps the earlier one's write out.
        producer.republish(encode(later.with_seq(8)))
        pipeline.wait_applied(reader, [later.id], tenant="acme")
        producer.republish(encode(earlier.with_seq(7)))
        pipeline.wait_applied(reader, [earlier.id], tenant="acme")
        states = [reader.status(e, tenant="acme").state for e in (later.id, earlier.id)]
        found = {m.key: m.content for m in reader.recall(ns, None)}
    assert states == ["applied", "superseded"]
    assert "amber" in found.get("favourite-colour", "") and "red" not in str(found)
