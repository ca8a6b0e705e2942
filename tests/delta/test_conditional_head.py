"""Saves onto the head this process wrote skip reading it (S3 ``If-Match``), and a
head changed by anyone else (another process, a delete) is never overwritten blind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.delta.conftest import make_bucket
from tulip_memory.delta import DeltaCheckpointer, S3DeltaStorage
from tulip_memory.delta.objects import ObjectStoreDeltaStorage
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.messages import Message, Role
from tulip_memory.objects import MemoryObjectStore
from tulip_memory.state import AgentState
from tulip_wire.statedelta import snapshot


class CountedS3(S3DeltaStorage):
    """An S3 storage counting the GETs its client sends."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.gets = 0
        self.client.meta.events.register("before-call.s3.GetObject", self._count)

    def _count(self, **_: Any) -> None:
        self.gets += 1


def states(n: int, who: str = "a") -> list[AgentState]:
    msgs = [Message(role=Role.USER, content=f"{who} {i} " + "x" * (i % 50)) for i in range(n)]
    return [AgentState(messages=tuple(msgs[: i + 1]), iterations=i) for i in range(n)]


@pytest.fixture
def bucket(s3_client: Any) -> str:
    return make_bucket(s3_client)


def storage(bucket: str, s3_endpoint: str, **options: Any) -> CountedS3:
    return CountedS3(bucket, "ck", endpoint_url=s3_endpoint, region_name="us-east-1", **options)


async def test_a_run_of_saves_reads_the_head_once(bucket: str, s3_endpoint: str) -> None:
    """...and no history object: merges find their inputs, and old loads every object,
    in the history cache, which keeps what the checkpointer wrote."""
    s = storage(bucket, s3_endpoint)
    cp = tenant_checkpointer(DeltaCheckpointer(s), "acme")  # through the tenant view too
    thread = states(40)
    ids = [await cp.save(st, "t") for st in thread]
    assert s.gets == 1  # the first save's GET (no head yet)
    for cid, st in zip(ids, thread, strict=True):
        assert await cp.load("t", cid) == st
    assert s.gets == 1 + len(ids)  # the head, once per load
    cold = storage(bucket, s3_endpoint)
    assert await tenant_checkpointer(DeltaCheckpointer(cold), "acme").load("t", ids[7]) == thread[7]
    assert cold.gets > 1  # a checkpointer that wrote nothing reads the objects
    off = storage(bucket, s3_endpoint, conditional_writes=False)
    plain = DeltaCheckpointer(off)
    for st in thread[:10]:
        await plain.save(st, "u")
    assert off.gets >= 10  # without tags every save reads the head


async def test_two_processes_alternating_lose_no_checkpoint(bucket: str, s3_endpoint: str) -> None:
    """Each checkpointer (its own cache, as another process) finds the head changed by
    the other, reads it and appends: every save of both is in the history, in order."""
    a = DeltaCheckpointer(storage(bucket, s3_endpoint))
    b = DeltaCheckpointer(storage(bucket, s3_endpoint))
    sa, sb = states(30, "a"), states(30, "b")
    saved: list[tuple[str, AgentState]] = []
    for i in range(30):
        saved.append((await a.save(sa[i], "t"), sa[i]))
        saved.append((await b.save(sb[i], "t"), sb[i]))
    assert await a.load("t") == sb[-1]
    listed = await a.list_checkpoints("t", limit=100)
    assert listed == [cid for cid, _ in reversed(saved)]
    for cid, st in saved:
        assert await b.load("t", cid) == st


async def test_a_deleted_thread_is_saved_afresh_not_resurrected(
    bucket: str, s3_endpoint: str
) -> None:
    a = DeltaCheckpointer(storage(bucket, s3_endpoint))
    other = DeltaCheckpointer(storage(bucket, s3_endpoint))
    thread = states(8)
    for st in thread[:5]:
        await a.save(st, "t")
    assert await other.delete("t")  # another process deletes the thread
    cid = await a.save(thread[5], "t")  # a's cached head is gone: no blind overwrite
    assert await other.list_checkpoints("t") == [cid]
    assert await other.load("t") == thread[5]


async def test_a_save_onto_the_written_head_reads_nothing_and_refuses_any_other_head(
    bucket: str, s3_endpoint: str
) -> None:
    """``save_onto_written`` writes only onto the head this checkpointer wrote, whose
    latest is the base named, with the digest named; else it writes nothing."""
    s = storage(bucket, s3_endpoint)
    cp = DeltaCheckpointer(s)
    thread = states(4)
    first = await cp.save(thread[0], "t")
    second = await cp.save(thread[1], "t")
    digest = snapshot(thread[2].to_checkpoint()).digest
    assert not await cp.save_onto_written(thread[2], "t", "c3", base=first, digest=digest)
    assert not await cp.save_onto_written(thread[2], "t", "c3", base=second, digest="0" * 16)
    assert await cp.list_checkpoints("t") == [second, first]  # nothing was written
    s.gets = 0
    assert await cp.save_onto_written(thread[2], "t", "c3", base=second, digest=digest)
    assert s.gets == 0  # onto its own head: no read
    other = DeltaCheckpointer(storage(bucket, s3_endpoint))  # another process
    await other.save(thread[3], "t", "c4")
    digest = snapshot(thread[3].to_checkpoint()).digest
    assert not await cp.save_onto_written(thread[3], "t", "c5", base="c3", digest=digest)
    assert await cp.list_checkpoints("t") == ["c4", "c3", second, first]
    assert await cp.load("t", "c3") == thread[2]


async def test_a_head_another_writer_changed_is_decoded_afresh() -> None:
    """A checkpointer reuses the manifest of the head it wrote only while the stored
    head is those very bytes: once another writer deleted a checkpoint and saved
    more, its loads and listings follow the new head."""
    store = MemoryObjectStore()
    a, b = (DeltaCheckpointer(ObjectStoreDeltaStorage(store)) for _ in range(2))
    thread = states(14)
    ids = [await a.save(st, "t") for st in thread[:8]]
    assert await a.load("t", ids[3]) == thread[3]  # its own head: its own manifest
    assert await b.delete("t", ids[3])
    more = [await b.save(st, "t") for st in thread[8:]]
    assert await a.load("t", ids[3]) is None
    assert await a.load("t", ids[4]) == thread[4] and await a.load("t", more[-1]) == thread[-1]
    assert await a.list_checkpoints("t", 20) == [*reversed([*ids[:3], *ids[4:], *more])]
    newest = await a.save(thread[-1], "t", "again")  # and saves onto the new head
    assert await b.load("t", newest) == thread[-1] and await b.load("t", more[0]) == thread[8]
