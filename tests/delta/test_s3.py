"""S3 specifics: retries on throttling and 5xx, threads off the loop, server-side copy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from tests.delta.conftest import grow, make_bucket
from tulip_memory.delta import DeltaCheckpointer, S3DeltaStorage


@pytest.fixture
async def s3(s3_endpoint: str, s3_client: Any) -> AsyncIterator[S3DeltaStorage]:
    storage = S3DeltaStorage(make_bucket(s3_client), "p", endpoint_url=s3_endpoint)
    try:
        yield storage
    finally:
        await storage.close()


class _Headers(dict[str, str]):
    pass


def failing(status: int, code: str, times: int) -> tuple[list[int], Any]:
    """A before-send hook answering ``status`` to the first ``times`` requests."""
    calls = [0]

    def hook(request: Any, **_: Any) -> AWSResponse | None:
        calls[0] += 1
        if calls[0] > times:
            return None
        body = f"<Error><Code>{code}</Code><Message>try later</Message></Error>".encode()
        raw = _Raw(body)
        return AWSResponse(request.url, status, _Headers(), raw)

    return calls, hook


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


@pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (500, "InternalError")])
async def test_throttling_and_server_errors_are_retried(
    s3: S3DeltaStorage, status: int, code: str
) -> None:
    cp = DeltaCheckpointer(s3)
    state = grow(3)[-1]
    calls, hook = failing(status, code, times=2)
    s3.client.meta.events.register("before-send.s3.PutObject", hook)
    try:
        await cp.save(state, "t")
    finally:
        s3.client.meta.events.unregister("before-send.s3.PutObject", hook)
    assert calls[0] >= 3
    assert await cp.load("t") == state


def test_retry_configuration() -> None:
    storage = S3DeltaStorage("b", endpoint_url="http://127.0.0.1:9", retry_mode="adaptive")
    assert storage.client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 5}
    with pytest.raises(ValueError):
        S3DeltaStorage("b", retry_mode="sometimes")


async def test_s3_calls_do_not_block_the_event_loop(s3: S3DeltaStorage) -> None:
    cp = DeltaCheckpointer(s3)
    state = grow(2)[-1]
    await cp.save(state, "t")

    def slow(**_: Any) -> None:
        time.sleep(0.3)

    s3.client.meta.events.register("before-send.s3.GetObject", slow)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        assert await cp.load("t") == state
    finally:
        task.cancel()
        s3.client.meta.events.unregister("before-send.s3.GetObject", slow)
    assert ticks >= 10


async def test_copy_thread_copies_history_server_side(s3: S3DeltaStorage) -> None:
    cp = DeltaCheckpointer(s3, max_chain_depth=2)
    states = grow(20)
    ids = [await cp.save(s, "src") for s in states]
    calls: dict[str, int] = {}

    def count(event_name: str, **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        calls[op] = calls.get(op, 0) + 1

    s3.client.meta.events.register("before-call.s3", count)
    try:
        assert await cp.copy_thread("src", "dst")
    finally:
        s3.client.meta.events.unregister("before-call.s3", count)
    assert calls.get("CopyObject", 0) >= 2
    assert calls.get("GetObject", 0) == 1  # the head only: history never leaves S3
    for cid, state in zip(ids, states, strict=True):
        assert await cp.load("dst", cid) == state


async def test_prefixes_keep_checkpointers_apart(s3_client: Any) -> None:
    bucket = make_bucket(s3_client)
    a = DeltaCheckpointer(S3DeltaStorage(bucket, "a", client=s3_client))
    b = DeltaCheckpointer(S3DeltaStorage(bucket, "a2", client=s3_client))
    await a.save(grow(1)[-1], "t-a")
    await b.save(grow(2)[-1], "t-b")
    assert await a.list_threads() == ["t-a"] and await b.list_threads() == ["t-b"]
    assert await a.load("t-b") is None
    await a.close()
    await b.close()
