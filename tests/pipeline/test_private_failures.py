"""No conversation text in logs or Flower, and a model's garbage costs one call.

A real extraction worker with a model (the local OpenAI-compatible server), a real
Flower beside it: the model echoes the user's private words in an item's ``type`` and
in an answer that is no JSON at all, adds a 400-digit confidence and a 100,000-character
``why``, and a broker client sends a malformed event quoting them. Flower's Failed view
lists exactly the dead letters, each with its class, queue and event; no log file and
no Flower answer holds the private words, which stay in the tenant's dead letter."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_faults import model_env, shard_of
from tests.pipeline.test_poison import flower, flower_tasks, sender, wait_for  # noqa: F401
from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import dead_reason
from tulip_memory.extract.parse import MAX_CONTENT_CHARS
from tulip_memory.messages import Message, Role
from tulip_ops.dev.embedded import run_async
from tulip_ops.dev.flower import Flower
from tulip_wire.events import SESSION_ENDED, TASKS, encode, session_ended

SSN = "078-05-1120"
CARD = "4111-1111-1111-1111"
NS = ("acme", "users", "private")
ASKED = re.compile(r"Session (\d+)\.")


class EchoingModel:
    """Session 1: one good memory, one whose type quotes the user, a 400-digit
    confidence and a 100,000-character ``why``; session 2: prose quoting the user."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def __call__(self, request: Any) -> Reply:
        n = int(ASKED.findall(json.dumps(request["messages"]))[-1])
        self.asked.append(n)
        if n == 2:
            return Reply(content=f"Sure! You said my card is {CARD}. Nothing to store.")
        items = [
            {"type": "user", "key": "pet", "content": "The user has a dog named Rex."},
            {"type": f"my SSN is {SSN}", "key": "ssn", "content": "x"},
            {
                "type": "user",
                "key": "plan",
                "content": "The user is on the gold plan.",
                "confidence": 10**400,
                "why": f"my SSN is {SSN}. " * 6000,
            },
        ]
        return Reply(content=json.dumps(items))


def said(n: int, text: str) -> list[Message]:
    return [Message(role=Role.USER, content=f"Session {n}. {text}")]


def test_dead_letters_in_flower_and_logs_hold_no_conversation_text(
    pipeline: Pipeline,
    flower: Flower,  # noqa: F811 - the fixture of test_poison
    fake_openai: FakeOpenAI,
    tmp_path: Path,
) -> None:
    model = EchoingModel()
    fake_openai.default_chat = model
    k = shard_of(NS)
    queue = f"memory.extract.{k}"
    pipeline.start_shard(k, **model_env(fake_openai))
    # A malformed event from a broker client: a role quoting the user.
    forged = session_ended(NS, "t", said(9, "hi"), ts=time.time()).with_seq(10**6)
    body = json.loads(encode(forged))
    body["payload"]["messages"][0]["role"] = f"my card is {CARD}"
    poison = uuid.uuid4().hex
    app = sender(pipeline.broker_url)
    try:
        app.send_task(TASKS[SESSION_ENDED], args=[json.dumps(body)], queue=queue, task_id=poison)
    finally:
        app.close()
    with pipeline.producer() as producer:
        good = producer.session_ended(NS, "t", said(1, f"My dog is Rex, my SSN is {SSN}."))
        garbage = producer.session_ended(NS, "t", said(2, f"My card is {CARD}."))
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, [good, garbage], "acme")
        pipeline.wait_applied(reader, [poison], "_unknown")
        assert reader.status(good, tenant="acme").state == "applied"
        assert reader.status(garbage, tenant="acme").state == "dead"
        memories = {m.key: m for m in reader.recall(NS, None)}
    # The good items kept, without the unusable fields; the quoting item dropped.
    assert set(memories) == {"pet", "plan"}
    assert "why" not in memories["plan"].metadata
    assert "confidence" not in memories["plan"].metadata
    assert all(len(str(m.metadata)) < MAX_CONTENT_CHARS for m in memories.values())
    assert model.asked.count(2) == 1  # an unusable answer is not paid for again
    # The full reasons stay in the tenants' dead letters.
    assert CARD in run_async(dead_reason(pipeline.admin_url, poison))
    assert "UnusableAnswer" in run_async(dead_reason(pipeline.admin_url, garbage))

    def failed() -> dict[str, Any] | None:
        tasks = flower_tasks(flower)
        found = {t: v for t, v in tasks.items() if v.get("state") == "FAILURE"}
        return found if len(found) >= 2 else None

    shown = wait_for("both dead letters FAILURE in Flower", failed, timeout=30)
    assert set(shown) == {garbage, poison}  # exactly the dead letters
    for event_id, kind in ((garbage, "UnusableAnswer"), (poison, "EventError")):
        exception = shown[event_id]["exception"]
        assert kind in exception and f"event {event_id}" in exception and queue in exception
        assert f"tulip-memory dlq show {event_id}" in exception
    everything = json.dumps(flower_tasks(flower))
    logs = {p.name: p.read_text(errors="replace") for p in tmp_path.rglob("*.log")}
    assert {"flower.log", f"extract-{k}.log"} <= set(logs)
    for secret in (SSN, CARD):
        assert secret not in everything
        assert [name for name, text in logs.items() if secret in text] == []
