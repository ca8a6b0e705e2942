"""Oversized, malformed and invalid requests are refused as problem details naming
what is wrong, by the same checks the Python producer makes."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.service.conftest import Stack, problem
from tests.support.service import ServiceProcess
from tulip_producer import Producer
from tulip_wire.events import EventError

WORKERS = False  # nothing here waits for an event to be applied
LIMIT = 256 * 1024  # the module service's TULIP_HTTP_MAX_BODY_BYTES


@pytest.fixture
def client(stack: Stack, tenant: str) -> Iterator[httpx.Client]:
    with stack.client(stack.key(tenant)) as c:
        yield c


def _body(tenant: str, **fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "namespace": [tenant, "u"],
        "thread_id": "t",
        "messages": [{"role": "user", "content": "hello"}],
    }
    body.update(fields)
    return body


def test_an_oversized_body_is_413_declared_or_streamed(client: httpx.Client, tenant: str) -> None:
    big = _body(tenant, messages=[{"role": "user", "content": "x" * LIMIT}])
    problem(client.post("/v1/sessions", json=big), 413, "body-too-large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the service counts as it reads
        yield b'{"namespace": ["' + tenant.encode() + b'"], "thread_id": "t", "messages": [{"role'
        yield b'": "user", "content": "' + b"y" * LIMIT + b'"}]}'

    streamed = client.post(
        "/v1/sessions", content=chunks(), headers={"content-type": "application/json"}
    )
    problem(streamed, 413, "body-too-large")


def test_malformed_bodies_and_media_types(client: httpx.Client, tenant: str) -> None:
    json_type = {"content-type": "application/json"}
    problem(client.post("/v1/sessions", content=b"{not json", headers=json_type), 400,
            "malformed-body")  # fmt: skip
    problem(client.post("/v1/sessions", content=b"\xff\xfe", headers=json_type), 400,
            "malformed-body")  # fmt: skip
    as_text = client.post("/v1/sessions", content=b"{}", headers={"content-type": "text/plain"})
    problem(as_text, 415, "unsupported-media-type")
    problem(client.post("/v1/sessions", json=[1, 2]), 422, "invalid-request")


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"messages": [{"role": "robot", "content": "x"}]}, "#/messages/0/role"),
        ({"messages": [{"role": "user", "content": 7}]}, "#/messages/0/content"),
        ({"namespace": []}, "#/namespace"),
        ({"thread_id": ""}, "#/thread_id"),
        ({"surprise": 1}, "#/surprise"),
    ],
)
def test_a_body_of_the_wrong_shape_names_the_field(
    client: httpx.Client, tenant: str, fields: dict[str, object], pointer: str
) -> None:
    body = problem(client.post("/v1/sessions", json=_body(tenant, **fields)), 422,
                   "invalid-request")  # fmt: skip
    assert [e["pointer"] for e in body["errors"]] == [pointer], body


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        (
            {"messages": [{"role": "user", "content": "x", "metadata": {"timestamp": "soon"}}]},
            "#/messages/0",
        ),
        ({"metadata": {"timestamp": "not a time"}}, "#/metadata/timestamp"),
        ({"thread_id": "a\u0000b"}, "#/thread_id"),
        ({"namespace": ["TENANT", "a\u001fb"]}, "#/namespace/1"),
    ],
)
def test_what_the_producer_refuses_is_refused_with_its_reason(
    client: httpx.Client, tenant: str, fields: dict[str, object], pointer: str
) -> None:
    """Shapes the document allows but the producer's validation does not: the same
    refusal as ``Producer.session_ended`` (one validation path), as a 422 pointing
    at the field."""
    body = _body(tenant, **fields)
    body["namespace"] = [tenant if p == "TENANT" else p for p in body["namespace"]]  # type: ignore[attr-defined]
    refused = problem(client.post("/v1/sessions", json=body), 422, "invalid-request")
    assert refused["errors"][0]["pointer"] == pointer, refused
    producer = Producer.from_urls("redis://127.0.0.1:1/0", spool_dir="/nonexistent/never")
    try:
        with pytest.raises((EventError, TypeError, ValueError)) as raised:
            producer.session_ended(
                tuple(body["namespace"]),  # type: ignore[arg-type]
                body["thread_id"],  # type: ignore[arg-type]
                body["messages"],  # type: ignore[arg-type]
                body.get("metadata"),  # type: ignore[arg-type]
            )
    finally:
        producer.close(0)
    reason = getattr(raised.value, "reason", None) or str(raised.value)
    assert refused["detail"] == reason


def test_query_parameters_are_checked(client: httpx.Client, tenant: str) -> None:
    cases: list[tuple[dict[str, str | int], str]] = [
        ({"namespace": tenant, "limit": 0}, "limit"),
        ({"namespace": tenant, "limit": "many"}, "limit"),
        ({}, "namespace"),
    ]
    for params, name in cases:
        body = problem(client.get("/v1/memories", params=params), 422, "invalid-request")
        assert body["errors"][0]["parameter"] == name
    body = problem(client.get("/v1/turns", params={"namespace": tenant, "q": "x",
                                                    "since": "2024-01-01T00:00:00"}), 422,
                   "invalid-request")  # fmt: skip
    assert body["errors"][0]["parameter"] == "since"  # a time without a zone is ambiguous
    problem(client.get("/v1/nowhere"), 404, "not-found")
    problem(client.delete("/v1/sessions"), 405, "method-not-allowed")


def test_a_request_in_flight_when_the_service_stops_is_answered(stack: Stack, tenant: str) -> None:
    """Graceful shutdown: SIGTERM while a request's body is still arriving; the request
    completes (202) and the service exits 0."""
    service = ServiceProcess(stack.env, stack.service.log.with_name("drain.log")).start()
    try:
        message = {"role": "user", "content": "drained"}
        body = json.dumps({"namespace": [tenant, "u"], "thread_id": "t", "messages": [message]})
        body_bytes = body.encode()
        head = (
            f"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {stack.key(tenant)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body_bytes)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", service.port), timeout=30) as sock:
            sock.sendall(head + body_bytes[:20])
            time.sleep(0.5)  # the request is in flight: headers read, body not whole
            service.terminate()
            time.sleep(0.5)
            sock.sendall(body_bytes[20:])
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 202"), reply[:200]
        assert service.stop() == 0
    finally:
        service.stop()
