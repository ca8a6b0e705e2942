"""``TulipSaver``: LangGraph's ``BaseCheckpointSaver`` over this project's delta storage.

Each namespace of a LangGraph thread is one delta thread
(:mod:`~tulip_memory.langgraph.threads`) whose state is a document
(:mod:`~tulip_memory.langgraph.document`): a put stores what changed since the
namespace's previous save (a step that appends messages stores those messages), the
latest checkpoint is one GET, an older one the head, its history objects and the entry
holding its pending writes, all as :mod:`tulip_memory.delta` lays out. Every operation
runs on one private event loop (a :class:`~tulip_memory._portal.Portal`), awaited from
the caller's loop by the async methods and blocked on by the sync ones: one
implementation of each, and the storage's locks and pools bound to one loop.
Serializing and deserializing values happen on the caller's side of it.
"""

from __future__ import annotations

import asyncio
import builtins
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from tulip_memory._portal import Portal
from tulip_memory.delta import DeltaCheckpointer, InMemoryObjectStorage
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.langgraph import document as docs
from tulip_memory.langgraph.document import Document
from tulip_memory.langgraph.threads import (
    delta_thread,
    namespace_key,
    namespaces_prefix,
    parse_delta_thread,
    run_key,
    runs_prefix,
)
from tulip_memory.registry import get_checkpointer

#: Markers (:mod:`~tulip_memory.langgraph.threads`) this object remembers writing.
MAX_MARKED = 4096
#: Every checkpoint id of a thread (the manifest lists them all).
ALL = 1 << 62
PRUNE_STRATEGIES = ("keep_latest", "delete")
#: The id of a delta entry that only added pending writes.
_WRITES_ENTRY = "\x1fw"

#: thread, namespace, checkpoint id, the newest document, the checkpoint's own, and the
#: one holding its writes.
Found = tuple[str, str, str, Document, Document, Document]


class TulipSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer on delta storage: ``TulipSaver.from_url("s3://b/p")``,
    ``"file:///var/lib/threads"`` or ``"memory"``, or ``TulipSaver(checkpointer)`` over
    a :class:`~tulip_memory.delta.DeltaCheckpointer` (its storage, policy and caches).

    ``tenant`` scopes every thread, marker and listing to that tenant's keys
    (:mod:`tulip_memory.delta.tenants`): the same thread id in two tenants is two
    threads. ``serde`` is LangGraph's serializer protocol (default: its
    ``JsonPlusSerializer``; an ``EncryptedSerializer`` encrypts every value and write).
    """

    def __init__(
        self,
        checkpointer: DeltaCheckpointer | None = None,
        *,
        tenant: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        base = checkpointer or DeltaCheckpointer(InMemoryObjectStorage())
        if not base.storage.uses_layout:
            raise TypeError(
                "TulipSaver needs a delta storage with the object contract (file, S3, "
                f"InMemoryObjectStorage), not {type(base.storage).__name__}"
            )
        self.threads = base if tenant is None else tenant_checkpointer(base, tenant)
        self.storage = self.threads.storage
        self.tenant = tenant
        self._base = base
        self._portal = Portal("tulip-langgraph")
        self._marked: OrderedDict[str, None] = OrderedDict()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        tenant: str | None = None,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> TulipSaver:
        """A saver on ``memory``, ``file:<dir>`` / ``file:///abs/dir`` or
        ``s3://bucket/prefix`` (``endpoint_url=`` for another S3 API, else
        ``TULIP_S3_ENDPOINT_URL``); ``options`` go to the storage as in
        :func:`~tulip_memory.registry.get_checkpointer`."""
        checkpointer = get_checkpointer(url, **options)
        if not isinstance(checkpointer, DeltaCheckpointer):
            raise TypeError(f"{url!r} is not delta storage ({type(checkpointer).__name__})")
        return cls(checkpointer, tenant=tenant, serde=serde)

    # -- LangGraph's methods: sync blocks on the portal, async awaits it ---------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _where(config)
        found = self._portal.call(self._get(thread_id, ns, get_checkpoint_id(config)))
        return None if found is None else self._tuple(found)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _where(config)
        found = await self._portal.run(self._get(thread_id, ns, get_checkpoint_id(config)))
        return None if found is None else self._tuple(found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        found = self._portal.call(self._list(config, filter, before, limit))
        return iter([self._tuple(f) for f in found])

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in await self._portal.run(self._list(config, filter, before, limit)):
            yield self._tuple(found)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._portal.call(self._put(*self._prepare(config, checkpoint, metadata)))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._portal.run(self._put(*self._prepare(config, checkpoint, metadata)))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._portal.call(self._put_writes(*self._writes(config, writes, task_id, task_path)))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        prepared = self._writes(config, writes, task_id, task_path)
        await self._portal.run(self._put_writes(*prepared))

    def delete_thread(self, thread_id: str) -> None:
        self._portal.call(self._delete_thread(str(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._portal.run(self._delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._portal.call(self._delete_for_runs([str(r) for r in run_ids]))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._portal.run(self._delete_for_runs([str(r) for r in run_ids]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._portal.call(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._portal.run(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._portal.call(self._prune([str(t) for t in thread_ids], _strategy(strategy)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._portal.run(self._prune([str(t) for t in thread_ids], _strategy(strategy)))

    # -- the caller's side: packing and unpacking values ---------------------------------

    def _prepare(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[str, str, docs.PreparedCheckpoint]:
        thread_id, ns = _where(config)
        parent = config["configurable"].get("checkpoint_id")
        md = get_serializable_checkpoint_metadata(config, metadata)
        return thread_id, ns, docs.prepare_checkpoint(self.serde, checkpoint, md, parent)

    def _writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, str, builtins.list[Any]]:
        thread_id, ns = _where(config)
        cid = config["configurable"]["checkpoint_id"]
        return thread_id, ns, docs.prepare_writes(self.serde, cid, writes, task_id, task_path)

    def _tuple(self, found: Found) -> CheckpointTuple:
        thread_id, ns, cid, newest, own, holder = found
        entry = docs.index_entry(newest, cid)
        assert entry is not None  # _get and _list find only indexed checkpoints
        parent = entry[1]
        where = {"thread_id": thread_id, "checkpoint_ns": ns}
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": cid}},
            checkpoint=docs.read_checkpoint(self.serde, own),  # type: ignore[arg-type]
            metadata=docs.read_metadata(self.serde, entry),  # type: ignore[arg-type]
            parent_config=(
                {"configurable": {**where, "checkpoint_id": parent}} if parent else None
            ),
            pending_writes=docs.read_writes(self.serde, holder, newest, cid),
        )

    # -- the portal's side: documents in and out of the delta storage -------------------

    async def _get(self, thread_id: str, ns: str, cid: str | None) -> Found | None:
        found = await self._found(thread_id, ns, [cid])
        return found[0] if found else None

    async def _found(
        self, thread_id: str, ns: str, cids: Sequence[str | None]
    ) -> builtins.list[Found]:
        """The checkpoints ``cids`` (None: the newest) of one namespace with the
        documents they are read from: one read of the head, and one more when some
        writes are held by older entries."""
        dt = delta_thread(thread_id, ns)
        entries: builtins.list[str] = []
        docs_by_id: dict[str | None, Document] = {}
        if all(cid is None for cid in cids):  # the newest: its head alone, no manifest read
            only = await self.threads.load_data(dt)
            if only is not None:
                docs_by_id[None] = only
        else:
            entries, docs_by_id = await self.threads.load_many(dt, [None, *cids])
        newest = docs_by_id.get(None)
        if newest is None:
            return []
        wanted: builtins.list[str] = []
        for cid in cids:
            current = cid or docs.checkpoint_id(newest)
            if current is not None and docs.index_entry(newest, current) is not None:
                wanted.append(current)
        holders = {cid: docs.writes_entry(newest, entries, cid) for cid in wanted}
        more = [h for h in holders.values() if h is not None and h not in docs_by_id]
        if more:
            docs_by_id.update((await self.threads.load_many(dt, more))[1])
        found: builtins.list[Found] = []
        for cid in wanted:
            own = newest if docs.checkpoint_id(newest) == cid else docs_by_id.get(cid)
            holder = newest if holders[cid] is None else docs_by_id.get(holders[cid])
            if own is not None and holder is not None:
                found.append((thread_id, ns, cid, newest, own, holder))
        return found

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[Found]:
        wanted = get_checkpoint_id(config) if config else None
        below = get_checkpoint_id(before) if before else None
        picked: builtins.list[tuple[str, str, str]] = []
        for thread_id, ns in await self._places(config):
            newest = await self.threads.load_data(delta_thread(thread_id, ns))
            for entry in (newest or {}).get(docs.INDEX) or ():
                cid = entry[0]
                if (wanted and cid != wanted) or (below and not cid < below):
                    continue
                if filter and not _matches(docs.read_metadata(self.serde, entry), filter):
                    continue
                picked.append((cid, thread_id, ns))
        picked.sort(reverse=True)
        if limit is not None:
            picked = picked[: max(limit, 0)]
        by_place: dict[tuple[str, str], builtins.list[str]] = {}
        for cid, thread_id, ns in picked:
            by_place.setdefault((thread_id, ns), []).append(cid)
        found: builtins.list[Found] = []
        for (thread_id, ns), cids in by_place.items():
            found.extend(await self._found(thread_id, ns, cids))
        found.sort(key=lambda f: f[2], reverse=True)
        return found

    async def _places(self, config: RunnableConfig | None) -> builtins.list[tuple[str, str]]:
        """The (thread, namespace) pairs a listing covers."""
        if config is None:
            pairs = [parse_delta_thread(t) async for t in self.threads.iter_threads()]
            return [p for p in pairs if p is not None]
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns")
        if ns is not None:
            return [(thread_id, str(ns))]
        return [(thread_id, n) for n in await self._namespaces(thread_id)]

    async def _put(self, thread_id: str, ns: str, put: docs.PreparedCheckpoint) -> RunnableConfig:
        dt = delta_thread(thread_id, ns)
        markers = {namespace_key(thread_id, ns): ns.encode("utf-8", "surrogatepass")}
        run = docs.from_json(self.serde, put.entry[2]).get("run_id")
        if isinstance(run, str) and run:
            markers[run_key(run, dt)] = dt.encode("utf-8", "surrogatepass")
        await self._mark(markers)
        unmarked: builtins.list[str] = []

        def change(current: Document | None) -> tuple[Document, dict[str, int]]:
            # What this object remembers writing may have been deleted since by another
            # process (delete_thread, delete_for_runs): a new namespace, or a run new to
            # it, gets its markers again.
            if current is None or docs.checkpoint_id(current) is None:
                unmarked.extend(markers)
            elif isinstance(run, str) and run not in docs.run_ids(self.serde, current):
                unmarked.append(run_key(run, dt))
            return docs.with_checkpoint(current, put)

        await self.threads.update(dt, change, put.id)
        if unmarked:
            await self.storage.write_objects({k: markers[k] for k in unmarked})
        where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": put.id}
        return {"configurable": where}

    async def _put_writes(self, thread_id: str, ns: str, group: builtins.list[Any]) -> None:
        if not group[3]:
            return
        await self._mark({namespace_key(thread_id, ns): ns.encode("utf-8", "surrogatepass")})
        dt = delta_thread(thread_id, ns)
        entry = _WRITES_ENTRY + secrets.token_hex(8)
        await self.threads.update(dt, lambda current: docs.with_writes(current, group), entry)

    async def _mark(self, markers: dict[str, bytes]) -> None:
        """Write the markers this object has not written yet (remembered, bounded)."""
        new = {k: v for k, v in markers.items() if k not in self._marked}
        if new:
            await self.storage.write_objects(new)
        for key in markers:
            self._marked[key] = None
            self._marked.move_to_end(key)
        while len(self._marked) > MAX_MARKED:
            self._marked.popitem(last=False)

    async def _unmark(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._marked.pop(key, None)
        if keys:
            await self.storage.delete_objects(keys)

    async def _namespaces(self, thread_id: str) -> builtins.list[str]:
        keys = await self.storage.list_all(namespaces_prefix(thread_id))
        got = await self.storage.read_objects(keys) if keys else {}
        return sorted(v.decode("utf-8", "surrogatepass") for v in got.values() if v is not None)

    async def _drop(self, thread_id: str, ns: str, newest: Document | None) -> None:
        """Delete one namespace: its delta thread, then its markers."""
        dt = delta_thread(thread_id, ns)
        runs = docs.run_ids(self.serde, newest) if newest else set()
        await self.threads.delete(dt)
        await self._unmark([run_key(r, dt) for r in sorted(runs)] + [namespace_key(thread_id, ns)])

    async def _delete_thread(self, thread_id: str) -> None:
        for ns in await self._namespaces(thread_id):
            newest = await self.threads.load_data(delta_thread(thread_id, ns))
            await self._drop(thread_id, ns, newest)

    async def _copy_thread(self, source: str, target: str) -> None:
        await self._delete_thread(target)
        for ns in await self._namespaces(source):
            src, dst = delta_thread(source, ns), delta_thread(target, ns)
            newest = await self.threads.load_data(src)
            if newest is None:
                continue
            markers = {namespace_key(target, ns): ns.encode("utf-8", "surrogatepass")}
            for run in docs.run_ids(self.serde, newest):
                markers[run_key(run, dst)] = dst.encode("utf-8", "surrogatepass")
            await self._mark(markers)
            await self.threads.copy_thread(src, dst)

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._delete_thread(thread_id)
            else:
                await self._keep_latest(thread_id)

    async def _keep_latest(self, thread_id: str) -> None:
        """Each namespace down to its newest checkpoint (and its writes); a subgraph
        call's namespace goes with the root checkpoint it started from, once that one
        is saved and pruned away (as LangGraph's Postgres saver does)."""
        newest = {
            ns: doc
            for ns in await self._namespaces(thread_id)
            if (doc := await self.threads.load_data(delta_thread(thread_id, ns))) is not None
        }
        for doc in newest.values():
            _refuse_delta_channels(self.serde, doc, thread_id)
        root = newest.get("")
        root_ids = {e[0] for e in (root or {}).get(docs.INDEX) or ()}
        root_kept = docs.checkpoint_id(root) if root else None
        for ns, doc in newest.items():
            cid = docs.checkpoint_id(doc)
            if cid is None:
                continue
            entry = docs.index_entry(doc, cid)
            parents = docs.read_metadata(self.serde, entry).get("parents") if entry else None
            started = parents.get("") if isinstance(parents, dict) else None
            if ":" in ns and started in root_ids and started != root_kept:
                await self._drop(thread_id, ns, doc)
                continue
            dropped = {e[0] for e in doc.get(docs.INDEX) or ()} - {cid}
            dropped |= {g[0] for g in docs.groups(doc)} - {cid}
            dt = delta_thread(thread_id, ns)
            gone = docs.run_ids(self.serde, doc) - docs.run_ids(
                self.serde, kept := docs.without(doc, dropped)
            )
            await self.threads.replace(dt, kept, cid)
            await self._unmark([run_key(r, dt) for r in sorted(gone)])

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        places: dict[str, list[str]] = {}
        for run in runs:
            keys = await self.storage.list_all(runs_prefix(run))
            got = await self.storage.read_objects(keys) if keys else {}
            for key, value in got.items():
                if value is not None:
                    places.setdefault(value.decode("utf-8", "surrogatepass"), []).append(key)
        for dt, markers in places.items():
            await self._delete_runs_of(dt, runs)
            await self._unmark(markers)

    async def _delete_runs_of(self, dt: str, runs: set[str]) -> None:
        """Delete the checkpoints of ``runs`` from one namespace: their entries and the
        entries of writes saved while they were the newest (those hold their values)."""
        newest = await self.threads.load_data(dt)
        if newest is None:
            return
        index = newest.get(docs.INDEX) or []
        doomed = {e[0] for e in index if docs.read_metadata(self.serde, e).get("run_id") in runs}
        if not doomed:
            return
        kept = docs.without(newest, doomed)
        if not kept[docs.INDEX]:
            await self.threads.delete(dt)
            return
        # The writes the head will keep: the new newest two checkpoints' (from the
        # entries holding them, read before anything is deleted) and the late ones.
        place = parse_delta_thread(dt)
        assert place is not None  # the run markers name only this saver's threads
        window = [e[0] for e in kept[docs.INDEX][-2:]]
        groups = [
            g
            for found in await self._found(*place, window)
            for g in docs.groups(found[5])
            if g[0] == found[2]
        ]
        groups += [g for g in docs.groups(kept) if g not in groups and g[0] not in window]
        puts = {e[0] for e in index}
        current: str | None = None
        entries: builtins.list[str] = []
        for eid in reversed(await self.threads.list_checkpoints(dt, ALL)):
            current = eid if eid in puts else current
            if current in doomed:
                entries.append(eid)
        for eid in entries:
            await self.threads.delete(dt, eid)
        last = kept[docs.INDEX][-1][0]
        own = await self.threads.load_data(dt, last)
        if own is None:
            return
        final = {**own, docs.INDEX: kept[docs.INDEX], docs.WRITES: {"groups": groups}}
        entry = _WRITES_ENTRY + secrets.token_hex(8)
        await self.threads.update(dt, lambda _current: (final, None), entry)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the storage (when this saver made it) and stop the portal."""
        try:
            self._portal.call(self._base.close())
        finally:
            self._portal.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> TulipSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> TulipSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _where(config: RunnableConfig) -> tuple[str, str]:
    configurable = config["configurable"]
    return str(configurable["thread_id"]), str(configurable.get("checkpoint_ns") or "")


def _matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in filter.items())


def _strategy(strategy: str) -> str:
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}")
    return strategy


def _refuse_delta_channels(serde: SerializerProtocol, doc: Document, thread_id: str) -> None:
    """keep_latest would cut a ``DeltaChannel``'s history (its value is rebuilt from
    ancestors' writes): refused, as LangGraph's Postgres saver does."""
    for entry in doc.get(docs.INDEX) or ():
        if "counters_since_delta_snapshot" in docs.read_metadata(serde, entry):
            raise NotImplementedError(
                f"keep_latest can't prune threads that use a DeltaChannel: {thread_id}"
            )
