"""Delta storage fixtures: one suite, every backend (memory, file, S3 on moto)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest

from tulip_memory.delta import (
    DeltaStorage,
    FileDeltaStorage,
    InMemoryObjectStorage,
    ObjectPage,
    S3DeltaStorage,
)
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState


class CountingStorage(DeltaStorage):
    """Wraps a storage and counts what crosses it: one ``read_objects`` = one round trip."""

    def __init__(self, inner: DeltaStorage) -> None:
        self.inner = inner
        self.read_trips = 0
        self.gets = 0
        self.write_trips = 0

    def reset(self) -> None:
        self.read_trips = self.gets = self.write_trips = 0

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        self.read_trips += 1
        self.gets += len(keys)
        return await self.inner.read_objects(keys)

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        self.write_trips += 1
        await self.inner.write_objects(objects)

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await self.inner.delete_objects(keys)

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        return await self.inner.list_objects(prefix, start_after=start_after, limit=limit)

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return await self.inner.copy_objects(pairs)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(scope="session")
def s3_client(s3_endpoint: str) -> Any:
    """One client for the session (clients are thread-safe and slow to build)."""
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


def make_bucket(client: Any) -> str:
    name = f"tulip-delta-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["memory", "file", "s3"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DeltaStorage]:
    """A fresh, empty storage of each backend."""
    backend: DeltaStorage
    if request.param == "memory":
        backend = InMemoryObjectStorage()
    elif request.param == "file":
        backend = FileDeltaStorage(tmp_path / "checkpoints", fsync=False)
    else:
        client = request.getfixturevalue("s3_client")
        backend = S3DeltaStorage(make_bucket(client), "tenant/a", client=client)
    try:
        yield backend
    finally:
        await backend.close()


def message(i: int, text: str = "") -> Message:
    role = Role.USER if i % 2 == 0 else Role.ASSISTANT
    return Message(role=role, content=text or f"turn {i}: tell me more about {i * 7}")


def grow(n: int, *, metadata: Callable[[int], dict[str, object]] | None = None) -> list[AgentState]:
    """States of a thread growing by one message per save."""
    states = []
    messages: list[Message] = []
    for i in range(n):
        messages.append(message(i))
        meta = metadata(i) if metadata else {"turn": i}
        states.append(AgentState(messages=messages, iterations=i, metadata=meta))
    return states
