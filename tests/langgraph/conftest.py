"""A TulipSaver on each delta storage backend: memory, a directory, the S3 API."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from langgraph.checkpoint.serde.base import SerializerProtocol

from tulip_memory.delta import DeltaCheckpointer, InMemoryObjectStorage
from tulip_memory.langgraph import TulipSaver

SaverFactory = Callable[..., TulipSaver]


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    name = f"lg-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["memory", "file", "s3"])
def make_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SaverFactory]:
    """Builds savers on one backend (each test gets fresh storage: its own directory or
    bucket prefix), closed after the test."""
    made: list[TulipSaver] = []
    prefix = uuid.uuid4().hex[:8]
    objects = InMemoryObjectStorage()  # what every memory saver of the test shares

    def make(*, tenant: str | None = None, serde: SerializerProtocol | None = None) -> TulipSaver:
        """A saver as another process would have it: its own caches, the same storage."""
        if request.param == "memory":
            saver = TulipSaver(DeltaCheckpointer(objects), tenant=tenant, serde=serde)
        elif request.param == "file":
            url = f"file://{tmp_path}/threads"
            saver = TulipSaver.from_url(url, tenant=tenant, serde=serde)
        else:
            endpoint = request.getfixturevalue("s3_endpoint")
            url = f"s3://{request.getfixturevalue('bucket')}/{prefix}"
            saver = TulipSaver.from_url(url, tenant=tenant, serde=serde, endpoint_url=endpoint)
        made.append(saver)
        return saver

    yield make
    for saver in made:
        saver.close()
