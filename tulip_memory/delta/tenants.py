"""Thread state per tenant: the same thread id in two tenants is two threads.

The seed's checkpointer API (``DeltaCheckpointer.save(state, thread_id)``, ``load``,
``list_threads``, ...) knows no tenant, and keeps knowing none. Tenancy is layered
over the storage keys instead: :class:`TenantStorage` is a view of an object storage
whose every key carries the tenant right after its kind (``heads/t.<escaped tenant>/
...``, see :mod:`tulip_memory.delta.keys`), and :func:`tenant_checkpointer` is a
``DeltaCheckpointer`` on that view, with the base checkpointer's policy. Everything a
thread has (head, history, name, summary) is under its tenant's prefixes, so one tenant
can never read, list, copy over or delete another's threads; a tenant's data is four
prefixes (``heads/``, ``log/``, ``names/``, ``summaries/`` + ``t.<tenant>/``).

Threads saved before tenancy sit at the storage's root; :func:`adopt_thread` moves one
into a tenant (server-side copies, then the originals are deleted), which is what
``tulip-memory threads adopt`` runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from tulip_memory.delta.checkpointer import DeltaCheckpointer
from tulip_memory.delta.errors import HeadChanged
from tulip_memory.delta.keys import SUMMARIES, ThreadKeys, scoped_key, tenant_part, unscoped_key
from tulip_memory.delta.storage import DeltaStorage
from tulip_memory.objects import ObjectInfo, ObjectPage

#: Per-tenant checkpointers kept by :class:`TenantCheckpointers` (least recently used
#: go first; building one again is cheap).
MAX_CACHED_TENANTS = 1024


class TenantStorage(DeltaStorage):
    """``inner``'s objects of ``tenant``, as if they were the whole storage (keys moved
    by :func:`~tulip_memory.delta.keys.scoped_key`). Closing the view leaves ``inner``
    open (it is shared)."""

    def __init__(self, inner: DeltaStorage, tenant: str) -> None:
        if not inner.uses_layout:
            raise TypeError(
                f"thread state per tenant needs a storage with the object contract "
                f"(S3, file, InMemoryObjectStorage); {type(inner).__name__} keeps records only"
            )
        self.inner = inner
        self.tenant = tenant
        self.part = tenant_part(tenant)

    def _in(self, key: str) -> str:
        return scoped_key(self.part, key)

    def _out(self, key: str) -> str:
        return unscoped_key(self.part, key)

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        got = await self.inner.read_objects([self._in(k) for k in keys])
        return {k: got[self._in(k)] for k in keys}

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        await self.inner.write_objects({self._in(k): v for k, v in objects.items()})

    async def write_head(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        try:
            return await self.inner.write_head(self._in(key), data, if_match)
        except HeadChanged as e:
            raise HeadChanged(key) from e

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await self.inner.delete_objects([self._in(k) for k in keys])

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        after = None if start_after is None else self._in(start_after)
        page = await self.inner.list_objects(self._in(prefix), start_after=after, limit=limit)
        return ObjectPage(
            objects=tuple(ObjectInfo(self._out(o.key), o.size) for o in page.objects),
            truncated=page.truncated,
        )

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        moved = [(self._in(s), self._in(d)) for s, d in pairs]
        return [self._out(m) for m in await self.inner.copy_objects(moved)]

    async def close(self) -> None:
        """Nothing of its own to release: ``inner`` belongs to whoever made it."""


def tenant_checkpointer(base: DeltaCheckpointer, tenant: str) -> DeltaCheckpointer:
    """``base``'s storage and policy, for ``tenant``'s threads only."""
    storage = base.storage
    if isinstance(storage, TenantStorage):
        raise TypeError(f"this checkpointer is already scoped to tenant {storage.tenant!r}")
    return DeltaCheckpointer(
        TenantStorage(storage, tenant),
        base.max_chain_depth,
        base.compression_level,
        max_epoch_age=base.max_epoch_age,
        latest_cache=base.latest_cache.scoped(tenant),  # one budget for every tenant
        history_cache=base.history_cache.scoped(tenant),
    )


class TenantCheckpointers:
    """One checkpointer per tenant over a shared base, reused across calls (so saves to
    one thread stay serialised within the process, as ``DeltaCheckpointer`` does)."""

    def __init__(self, base: DeltaCheckpointer, limit: int = MAX_CACHED_TENANTS) -> None:
        self.base = base
        self._limit = limit
        self._cached: OrderedDict[str, DeltaCheckpointer] = OrderedDict()

    def of(self, tenant: str) -> DeltaCheckpointer:
        found = self._cached.get(tenant)
        if found is None:
            found = self._cached[tenant] = tenant_checkpointer(self.base, tenant)
            while len(self._cached) > self._limit:
                self._cached.popitem(last=False)
        else:
            self._cached.move_to_end(tenant)
        return found


async def adopt_thread(storage: DeltaStorage, tenant: str, thread_id: str) -> bool:
    """Move a thread saved at ``storage``'s root (before tenancy) into ``tenant``:
    history, head, name and summary are copied server-side, then the originals are
    deleted. False when the root holds no such thread. Run it with the checkpoint
    workers stopped (a save during the move could be lost)."""
    keys = ThreadKeys.of(thread_id)
    part = tenant_part(tenant)
    sources = [keys.head]
    token: str | None = None
    while True:
        page = await storage.list_objects(keys.log_prefix, start_after=token)
        sources += page.keys
        if not page.truncated or not page.keys:
            break
        token = page.keys[-1]
    extra = [k for k in (keys.name, SUMMARIES + keys.part) if k is not None]
    present = await storage.read_objects([keys.head, *extra])
    if present[keys.head] is None:
        return False
    sources += [k for k in extra if present[k] is not None]
    history, head = [k for k in sources if k != keys.head], [keys.head]
    # History first, the head last: a crash leaves an unreferenced copy, never a head
    # pointing at history that was not copied yet.
    for batch in (history, head):
        missing = await storage.copy_objects([(k, scoped_key(part, k)) for k in batch])
        if missing:
            raise FileNotFoundError(f"thread objects vanished during the move: {missing[:3]}")
    await storage.delete_objects(head)
    await storage.delete_objects(history)
    return True


__all__ = [
    "TenantCheckpointers",
    "TenantStorage",
    "adopt_thread",
    "tenant_checkpointer",
]
