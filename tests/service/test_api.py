"""Every endpoint of the service, round trip, against a real stack."""

from __future__ import annotations

import uuid

import httpx

from tests.service.conftest import Stack, problem


def session(text: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]


def test_a_session_is_accepted_applied_and_recalled(stack: Stack, tenant: str) -> None:
    ns = [tenant, "users", "u1"]
    with stack.client(stack.key(tenant)) as client:
        response = client.post(
            "/v1/sessions",
            json={
                "namespace": ns,
                "thread_id": "t-1",
                "messages": session("My favourite colour is teal. I work as a pilot."),
                "metadata": {"channel": "web"},
            },
        )
        assert response.status_code == 202, response.text
        event_id = response.json()["event_id"]
        assert response.headers["location"] == f"/v1/events/{event_id}"
        assert stack.wait_done(client, event_id) == "applied"
        status = client.get(f"/v1/events/{event_id}").json()
        assert status == {
            "event_id": event_id, "state": "applied", "reason": None, "memories": 2,
            "erased": None, "erased_at": None,
        }  # fmt: skip
        found = client.get("/v1/memories", params={"namespace": ns, "q": "colour"}).json()
        keys = {m["key"]: m["content"] for m in found["memories"]}
        assert keys["favourite-colour"] == "The user's favourite colour is teal."
        newest = client.get("/v1/memories", params={"namespace": ns, "limit": 1}).json()
        assert len(newest["memories"]) == 1
        turns = client.get("/v1/turns", params={"namespace": ns, "q": "pilot", "top_k": 3}).json()[
            "turns"
        ]
        assert turns and "pilot" in turns[0]["text"]
        assert set(turns[0]) == {"score", "turn", "turn_index", "text", "metadata"}
        later = client.get(
            "/v1/turns",
            params={"namespace": ns, "q": "pilot", "since": "2999-01-01T00:00:00Z"},
        ).json()
        assert later == {"turns": []}


def test_checkpoints_read_your_writes_append_and_views(stack: Stack, tenant: str) -> None:
    thread = f"case-{uuid.uuid4().hex[:6]}/triage"  # a slash in a thread id is fine
    state = {
        "messages": [
            {"role": "system", "content": "You triage."},
            {"role": "user", "content": "Alert 7731 fired."},
        ],
        "iterations": 3,
        "metadata": {"case": 7731},
    }
    with stack.client(stack.key(tenant)) as client:
        first = client.post(f"/v1/threads/{thread}/checkpoints", json={"state": state})
        assert first.status_code == 202, first.text
        first_id = first.json()["checkpoint_id"]
        loaded = client.get(f"/v1/threads/{thread}").json()  # before any worker wrote it
        assert loaded["messages"][1]["content"] == "Alert 7731 fired."
        assert (loaded["iterations"], loaded["metadata"]) == (3, {"case": 7731})
        assert loaded["thread_id"] == thread
        more = {"role": "assistant", "content": "Escalating."}
        second = client.post(
            f"/v1/threads/{thread}/checkpoints",
            json={"base": first_id, "messages": [more], "iterations": 4},
        )
        assert second.status_code == 202, second.text
        body = second.json()
        assert set(body) == {"event_id", "checkpoint_id"} and body["checkpoint_id"] != first_id
        now = client.get(f"/v1/threads/{thread}").json()
        assert [m["content"] for m in now["messages"]][-1] == "Escalating."
        assert now["iterations"] == 4 and now["metadata"] == {"case": 7731}
        assert stack.wait_done(client, body["event_id"]) == "applied"
        old = client.get(f"/v1/threads/{thread}", params={"checkpoint_id": first_id}).json()
        assert len(old["messages"]) == 2 and old["iterations"] == 3
        compacted = client.get(f"/v1/threads/{thread}", params={"view": "compacted"})
        assert compacted.status_code == 200 and compacted.json()["messages"]
        unknown = client.post(
            f"/v1/threads/{thread}/checkpoints",
            json={"base": uuid.uuid4().hex, "messages": [more]},
        )
        problem(unknown, 409, "unknown-base")
        problem(client.get("/v1/threads/no-such-thread"), 404, "not-found")


def test_health_readiness_metrics_and_the_document(stack: Stack) -> None:
    assert httpx.get(f"{stack.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{stack.url}/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "database": True, "broker": True}
    document = httpx.get(f"{stack.url}/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert 'tulip_http_requests_total{method="GET",route="/healthz",status="200"}' in metrics
    assert "tulip_http_request_seconds_bucket" in metrics


def test_forget_erases_a_namespace_and_a_thread_of_the_callers_tenant(
    stack: Stack, tenant: str
) -> None:
    ns = [tenant, "users", "u9"]
    with stack.client(stack.key(tenant)) as client:
        sent = client.post(
            "/v1/sessions",
            json={"namespace": ns, "thread_id": "t-9", "messages": session("I work as a pilot.")},
        ).json()["event_id"]
        saved = client.post(
            "/v1/threads/t-9/checkpoints",
            json={"state": {"messages": [{"role": "user", "content": "I fly planes."}]}},
        ).json()["event_id"]
        assert stack.wait_done(client, sent) == stack.wait_done(client, saved) == "applied"
        foreign = client.post("/v1/forget", json={"namespace": ["other", "users", "u9"]})
        assert problem(foreign, 403, "foreign-namespace")
        both = client.post("/v1/forget", json={"namespace": ns, "thread_id": "t-9"})
        assert problem(both, 422, "invalid-request")
        erases = [
            client.post("/v1/forget", json=body)
            for body in ({"namespace": ns}, {"thread_id": "t-9"})
        ]
        assert [r.status_code for r in erases] == [202, 202], [r.text for r in erases]
        for r in erases:
            event_id = r.json()["event_id"]
            assert stack.wait_done(client, event_id) == "applied"
            status = client.get(f"/v1/events/{event_id}").json()
            assert status["erased"] and status["erased_at"], status
        found = client.get("/v1/memories", params={"namespace": ns, "q": "pilot"}).json()
        assert found == {"memories": []}
        assert client.get("/v1/threads/t-9").status_code == 404
