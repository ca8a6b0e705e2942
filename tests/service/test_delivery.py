"""Events accepted with 202 are applied, in order, across a worker's SIGKILL."""

from __future__ import annotations

import time

from tests.pipeline.test_faults import ColourModel, model_env
from tests.service.conftest import Stack
from tests.support.openai_server import FakeOpenAI

WORKERS = False  # the test runs its own extract worker, on the model server

COLOURS = ["red", "green", "blue", "amber", "teal", "violet", "olive", "plum"]


def test_accepted_events_survive_a_worker_sigkill_in_order(
    stack: Stack, fake_openai: FakeOpenAI, tenant: str
) -> None:
    model = ColourModel(delay=0.4)
    fake_openai.default_chat = model
    worker = stack.workers.start("extract-0", ["memory.extract.0"], **model_env(fake_openai))
    ns = [tenant, "users", "killed"]
    with stack.client(stack.key(tenant)) as client:
        ids = []
        for n, colour in enumerate(COLOURS, start=1):
            text = f"Session {n}. My favourite colour is {colour}."
            body = {
                "namespace": ns,
                "thread_id": "t",
                "messages": [{"role": "user", "content": text}],
            }
            response = client.post("/v1/sessions", json=body)
            assert response.status_code == 202, response.text
            ids.append(response.json()["event_id"])
        deadline = time.monotonic() + 60
        while 4 not in model.asked and time.monotonic() < deadline:
            time.sleep(0.02)
        assert 4 in model.asked
        worker.kill()  # inside the model call of session 4: unacked, half done
        stack.workers.start("extract-0b", ["memory.extract.0"], **model_env(fake_openai))
        assert [stack.wait_done(client, e, timeout=120) for e in ids] == ["applied"] * len(ids)
        recalled = client.get("/v1/memories", params={"namespace": ns}).json()["memories"]
    assert {m["key"]: m["content"] for m in recalled}["favourite-colour"].endswith("plum")
    first_seen = [n for i, n in enumerate(model.asked) if n not in model.asked[:i]]
    assert first_seen == list(range(1, 9)), model.asked
    assert model.asked[model.asked.index(4) + 1] == 4, model.asked  # asked again, first
