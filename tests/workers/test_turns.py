"""Every message of a session becomes a turn exactly once, with its speaker, metadata
and the caller's time, through the extraction worker and the real Postgres."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.pg import app_store, dead_reason
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.store import PgMemory
from tulip_memory.turns import TurnHit
from tulip_producer.reader import AsyncReader
from tulip_wire.events import Envelope, EventError, encode, session_ended
from tulip_workers.extraction import APPLIED, DEAD, DUPLICATE, ExtractionWorker
from tulip_workers.extractors import heuristic
from tulip_workers.retry import RetryPolicy

FAST = RetryPolicy(attempts=2, base=0.01, cap=0.02)
TABLE = f"turns_{uuid.uuid4().hex[:8]}"
MAY_1 = datetime(2023, 5, 1, 9, 0, tzinfo=UTC).timestamp()
MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


def said(role: Role, text: str, mid: str, name: str, **meta: Any) -> Message:
    return Message(role=role, content=text, name=name, metadata={"id": mid, **meta})


def user(text: str, mid: str, **meta: Any) -> Message:
    return said(Role.USER, text, mid, "Maya", **meta)


def bot(text: str, mid: str, **meta: Any) -> Message:
    return said(Role.ASSISTANT, text, mid, "Ada", **meta)


FIRST = [
    Message(role=Role.SYSTEM, content="You are Ada."),
    bot("Welcome back! How was the move?", "m1"),
    user("Hi! I just moved to Lisbon.", "m2", timestamp="2023-05-01T09:02:00+00:00"),
    bot("Lisbon is lovely. Which neighbourhood?", "m3"),
    user("Alfama.", "m4", channel="app"),
    user("Near the castle, actually.", "m5"),
    bot("Great views up there.", "m6"),
    bot("Do you need tips on cafes?", "m7"),
    user("Yes please, somewhere with oat milk.", "m8"),
]
SECOND = [
    bot("Try Fabrica Coffee Roasters: they have oat milk.", "m9"),
    user("Thanks, I will.", "m10"),
    bot("Enjoy!", "m11"),
]


async def publish(
    worker: ExtractionWorker, ns: tuple[str, ...], msgs: list[Message], seq: int, when: float
) -> Envelope:
    env = session_ended(ns, "chat-1", msgs, {"timestamp": when, "user_id": "maya"}, ts=2e9)
    env = env.with_seq(seq)
    assert await worker.handle(encode(env), env.id) == APPLIED
    return env


async def all_turns(reader: AsyncReader, ns: tuple[str, ...]) -> list[TurnHit]:
    return await reader.recall_turns(ns, "Lisbon oat milk cafes", top_k=100)


def ids(hits: list[TurnHit]) -> list[str]:
    out = []
    for h in hits:
        sides = [h.turn, *([h.turn["reply"]] if "reply" in h.turn else [])]
        out += [s["metadata"]["id"] for s in sides]
    return sorted(out, key=lambda i: int(i[1:]))


def by_first_id(hits: list[TurnHit]) -> dict[str, TurnHit]:
    return {h.turn["metadata"]["id"]: h for h in hits}


async def test_leading_assistant_and_trailing_user_messages_are_turns_once(
    store: PgMemory, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    reader = AsyncReader(store)
    ns = (tenant, "users", "maya")
    await publish(worker, ns, FIRST, 1, MAY_1)
    hits = await all_turns(reader, ns)
    assert ids(hits) == [f"m{i}" for i in range(1, 9)]
    turns = by_first_id(hits)
    assert set(turns) == {"m1", "m2", "m4", "m5", "m7", "m8"}
    assert turns["m1"].turn["role"] == "assistant" and "reply" not in turns["m1"].turn
    assert turns["m4"].turn["metadata"] == {"id": "m4", "channel": "app"}  # no reply: m5 follows
    assert turns["m5"].turn["reply"]["metadata"]["id"] == "m6"
    assert "reply" not in turns["m7"].turn  # the assistant's second message in a row
    assert "reply" not in turns["m8"].turn  # open: the session ended on it
    assert turns["m2"].text == (
        "Maya: Hi! I just moved to Lisbon.\nAda: Lisbon is lovely. Which neighbourhood?"
    )
    assert turns["m2"].turn["name"] == "Maya" and turns["m2"].turn["reply"]["name"] == "Ada"
    assert turns["m2"].metadata["message_ids"] == ["m2", "m3"]
    assert turns["m2"].metadata["user_id"] == "maya"

    second = await publish(worker, ns, SECOND, 2, MAY_8)
    hits = await all_turns(reader, ns)
    assert ids(hits) == [f"m{i}" for i in range(1, 12)]  # m9 completed m8: no new row for it
    turns = by_first_id(hits)
    done = turns["m8"]
    assert done.turn["reply"]["content"][0]["text"].startswith("Try Fabrica")
    assert done.turn["timestamp"] == MAY_1 and done.turn["reply"]["timestamp"] == MAY_8
    assert done.text.endswith("\nAda: Try Fabrica Coffee Roasters: they have oat milk.")
    assert done.metadata["message_ids"] == ["m8", "m9"]
    assert done.metadata["completed_by"] == second.id
    assert turns["m10"].turn["reply"]["metadata"]["id"] == "m11"
    assert await worker.handle(encode(second), second.id) == DUPLICATE
    assert ids(await all_turns(reader, ns)) == [f"m{i}" for i in range(1, 12)]


async def test_an_open_turn_sent_again_is_not_indexed_twice(store: PgMemory, tenant: str) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    reader = AsyncReader(store)
    ns = (tenant, "users", "maya")
    await publish(worker, ns, FIRST, 1, MAY_1)
    await publish(worker, ns, [FIRST[-1], *SECOND], 2, MAY_8)  # the client resends m8
    hits = await all_turns(reader, ns)
    assert ids(hits) == [f"m{i}" for i in range(1, 12)]
    assert by_first_id(hits)["m8"].turn["reply"]["metadata"]["id"] == "m9"
    # Without ids, the same text counts as the same message.
    plain = (tenant, "users", "plain")
    ask = Message(role=Role.USER, content="Is it going to rain?")
    answer = Message(role=Role.ASSISTANT, content="No rain today.")
    await publish(worker, plain, [ask], 1, MAY_1)
    await publish(worker, plain, [ask, answer], 2, MAY_8)
    hits = await reader.recall_turns(plain, "rain", top_k=10)
    pairs = [(h.turn["content"][0]["text"], h.turn["reply"]["content"][0]["text"]) for h in hits]
    assert pairs == [("Is it going to rain?", "No rain today.")]


async def test_turn_times_are_the_callers(store: PgMemory, tenant: str) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    reader = AsyncReader(store)
    ns = (tenant, "users", "maya")
    await publish(worker, ns, FIRST, 1, MAY_1)
    turns = by_first_id(await all_turns(reader, ns))
    stated = datetime(2023, 5, 1, 9, 2, tzinfo=UTC).timestamp()
    assert turns["m2"].turn["timestamp"] == stated  # the message's own time
    assert turns["m2"].turn["reply"]["timestamp"] == MAY_1  # else the session's
    last = await store.last_turn(ns, "chat-1", 2)
    assert last is not None and last.turn["metadata"]["id"] == "m8" and last.at == MAY_1
    # Neither given: the publish time.
    env = session_ended((tenant, "u", "p"), "t", [FIRST[1]], ts=1_700_000_000.5).with_seq(1)
    assert await worker.handle(encode(env), env.id) == APPLIED
    (hit,) = await reader.recall_turns((tenant, "u", "p"), "move", top_k=5)
    assert hit.turn["timestamp"] == 1_700_000_000.5


@pytest.mark.parametrize("bad", ["yesterday", -5, 1e20, True, "2023-13-40"])
async def test_a_time_that_is_not_one_is_refused(
    store: PgMemory, postgres: Postgres, tenant: str, bad: object
) -> None:
    ns = (tenant, "users", "maya")
    with pytest.raises(EventError, match="time"):
        session_ended(ns, "t", [user("hi", "m1", timestamp=bad)], ts=1.0)
    with pytest.raises(EventError, match="timestamp"):
        session_ended(ns, "t", [user("hi", "m1")], {"timestamp": bad}, ts=1.0)
    # Forged past the producer: a dead letter naming the field, the shard goes on.
    env = session_ended(ns, "t", [user("hi", "m1")], ts=1.0).with_seq(1)
    assert env.payload is not None
    env.payload["messages"][0]["metadata"]["timestamp"] = bad
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    wire = json.dumps(env.to_dict())  # by hand: encode() would refuse it
    assert await worker.handle(wire, env.id) == DEAD
    assert "time" in await dead_reason(postgres.admin_dsn, env.id)
