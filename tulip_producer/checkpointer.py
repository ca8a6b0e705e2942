"""``QueuedCheckpointer``: the SDK's ``checkpointer=`` over the pipeline.

One tenant's threads: ``QueuedCheckpointer(producer, reader, inner, tenant="acme")``.
``save`` publishes a ``checkpoint.saved`` event and returns at once (the chat request
pays a Redis round trip, not an S3 write); ``load`` reads through the pending overlay,
so a thread's newest state is there before any worker ran. Listing goes to the
checkpoint store directly; ``delete`` first waits until the thread's queued saves are
durable (its pending state is gone), so no save still on its way brings the thread
back. ``get_checkpointer("queued:<inner>")`` builds one from the environment,
``<inner>`` naming the store the workers write (e.g. ``s3:bucket``), given ``tenant=``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.env import CHECKPOINT_URL
from tulip_memory.errors import TulipMemoryError
from tulip_memory.registry import BaseCheckpointer, get_checkpointer
from tulip_memory.state import AgentState
from tulip_producer.producer import AsyncProducer
from tulip_producer.reader import AsyncReader

#: How long ``delete`` waits for a thread's queued saves to be written.
DELETE_DRAIN_TIMEOUT = 120.0
_DRAIN_POLL = 0.1


class ThreadStillQueued(TulipMemoryError):
    """A delete was asked while saves of the thread were still on their way: nothing
    was deleted (deleting then would let those saves bring the thread back)."""


class QueuedCheckpointer:
    """The pipeline as one tenant's ``checkpointer=``: ``tenant`` is bound at
    construction, every thread id it is given is that tenant's (another tenant's thread
    of the same id is another thread). ``inner`` is the store the workers write (all
    tenants); this object only ever reaches ``tenant``'s part of it."""

    def __init__(
        self,
        producer: AsyncProducer,
        reader: AsyncReader,
        inner: BaseCheckpointer,
        *,
        tenant: str,
    ) -> None:
        if not isinstance(inner, DeltaCheckpointer):
            raise TypeError(
                "QueuedCheckpointer needs the workers' DeltaCheckpointer as inner, "
                f"not {type(inner).__name__}"
            )
        self.producer = producer
        self.reader = reader
        self.inner = inner
        self.tenant = tenant
        self.threads = tenant_checkpointer(inner, tenant)  # refuses a bad tenant now
        if reader.checkpointer is None:
            reader.checkpointer = inner

    async def save(
        self, state: AgentState, thread_id: str, checkpoint_id: str | None = None
    ) -> str:
        if checkpoint_id is not None:
            raise ValueError(
                "QueuedCheckpointer assigns checkpoint ids itself (ordering and "
                "idempotency rest on them); save without checkpoint_id"
            )
        return await self.producer.checkpoint_saved(thread_id, state, tenant=self.tenant)

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        return await self.reader.load(thread_id, checkpoint_id, tenant=self.tenant)

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[str]:
        return await self.threads.list_checkpoints(thread_id, limit)

    async def list_threads(self, limit: int | None = None) -> list[str]:
        return await self.threads.list_threads(limit)

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        return await self.threads.copy_thread(source_thread_id, dest_thread_id)

    async def delete(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> bool:
        """Delete once the thread's queued saves are durable: this producer's spool is
        flushed and the thread has no pending state (the checkpoint worker clears it
        when the newest save is written). Raises :class:`ThreadStillQueued`, deleting
        nothing, if that takes longer than ``timeout`` seconds (default
        :data:`DELETE_DRAIN_TIMEOUT`)."""
        timeout = DELETE_DRAIN_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if not await self.producer.flush(timeout):
            raise ThreadStillQueued(f"thread {thread_id!r}: saves still spooled after {timeout}s")
        while await self._pending(thread_id):
            if time.monotonic() > deadline:
                raise ThreadStillQueued(
                    f"thread {thread_id!r}: saves still queued after {timeout}s "
                    "(are the checkpoint workers running?); nothing deleted"
                )
            await asyncio.sleep(_DRAIN_POLL)
        return await self.threads.delete(thread_id, checkpoint_id)

    async def _pending(self, thread_id: str) -> bool:
        pending = self.reader.pending
        if pending is None:
            return False
        return await asyncio.to_thread(pending.exists, self.tenant, thread_id)

    async def close(self) -> None:
        await self.producer.close()
        await self.reader.close()


def queued_factory(
    config_hint: str | None = None,
    *,
    inner: BaseCheckpointer | None = None,
    tenant: str | None = None,
    **_: Any,
) -> QueuedCheckpointer:
    """``queued:<inner>`` for ``tenant`` (required): producer and reader from the
    environment, ``<inner>`` the checkpoint store (default ``TULIP_CHECKPOINT_URL``); a
    caller holding that store already passes it as ``inner`` (``S3Backend(...,
    queued=True, tenant=...)`` does)."""
    if tenant is None:
        raise ValueError(
            "the queued checkpointer needs tenant=...: thread state is keyed by "
            "(tenant, thread id), e.g. get_checkpointer('queued:s3:bucket', tenant='acme')"
        )
    if inner is None:
        inner_name = config_hint or CHECKPOINT_URL.read()
        if not inner_name:
            raise ValueError(
                "queued:<inner> needs the store the workers write, e.g. queued:s3:bucket"
            )
        inner = get_checkpointer(inner_name)
    reader = AsyncReader.from_env()
    reader.checkpointer = inner
    return QueuedCheckpointer(AsyncProducer.from_env(), reader, inner, tenant=tenant)
