"""The pipeline end to end: producer → broker → real celery shard workers → Postgres."""

from __future__ import annotations

import random
import time
import uuid

from tests.pipeline.conftest import Pipeline
from tulip_memory.messages import Message, Role

COLOURS = ["red", "green", "blue", "amber", "teal", "violet"]
CITIES = ["Oslo", "Lima", "Quito", "Perth", "Dakar", "Osaka"]


def user(text: str) -> list[Message]:
    return [Message(role=Role.USER, content=text)]


def test_interleaved_corrections_apply_in_order_per_namespace(pipeline: Pipeline) -> None:
    rng = random.Random(5)
    namespaces: list[tuple[str, ...]] = [(f"tenant{i % 5}", "users", f"u{i}") for i in range(50)]
    sessions: dict[tuple[str, ...], list[str]] = {}
    for ns in namespaces:
        c1, c2, c3 = rng.sample(COLOURS, 3)
        city1, city2 = rng.sample(CITIES, 2)
        sessions[ns] = [
            f"My favourite colour is {c1}. My home city is {city1}.",
            f"Actually, my favourite colour is {c2}.",
            f"Actually, my home city is {city2}.",
            f"Actually, my favourite colour is {c3}.",
        ]
    pipeline.start_shards()
    ids: dict[str, list[str]] = {}
    with pipeline.producer() as producer:
        # Interleave: round r of every namespace before round r + 1 of any.
        for r in range(4):
            order = list(namespaces)
            rng.shuffle(order)
            for ns in order:
                sent = producer.session_ended(ns, f"thread-{ns[2]}", user(sessions[ns][r]))
                ids.setdefault(ns[0], []).append(sent)
        assert producer.flush(timeout=30)
    with pipeline.reader() as reader:
        for tenant, sent_ids in ids.items():
            pipeline.wait_applied(reader, sent_ids, tenant)
            assert all(reader.status(e, tenant=tenant).state == "applied" for e in sent_ids)
        for ns, texts in sessions.items():
            colour = texts[3].rsplit(" ", 1)[1].rstrip(".")
            city = texts[2].rsplit(" ", 1)[1].rstrip(".")
            found = {m.key: m.content for m in reader.recall(ns, None, limit=10)}
            assert colour in found["favourite-colour"], (ns, found)
            assert city in found["home-city"], (ns, found)


def test_read_path_needs_no_worker(pipeline: Pipeline) -> None:
    """Recall and status answer from Postgres alone, before any worker runs."""
    with pipeline.producer() as producer, pipeline.reader() as reader:
        event_id = producer.session_ended(("solo", "u"), "t", user("My pet name is Rex."))
        assert reader.status(event_id, tenant="solo").state == "pending"
        assert reader.status(uuid.uuid4().hex, tenant="solo").state == "unknown"
        assert reader.status("not an id", tenant="solo").state == "unknown"
        # Another tenant asking about solo's event gets the answer of an unknown id.
        assert reader.status(event_id, tenant="other").state == "unknown"
        assert reader.recall(("solo", "u"), "pet") == []
        started = time.monotonic()
        pipeline.start_shards()
        pipeline.wait_applied(reader, [event_id], "solo")
        assert time.monotonic() - started < 120
        assert [m.key for m in reader.recall(("solo", "u"), "pet name")] == ["pet-name"]
