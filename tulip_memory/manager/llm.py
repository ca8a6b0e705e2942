"""``LLMMemoryManager``: long-term memory on any ``BaseStore``.

Memories live under ``(*prefix, type)`` with their key as the store key, so saving a
``(type, key)`` again updates it. The prefix is per call: :meth:`scoped` sets it in a
context variable (so concurrent tasks keep their own), and a ``namespace_resolver``
picks it per run. ``namespace[0]`` is the tenant; a recall never spans tenants.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

# A module import, not a name: extract/ imports manager/ too, and either may load first.
import tulip_memory.extract.heuristic as heuristic
from tulip_memory.errors import StoreCapabilityError
from tulip_memory.manager.base import BaseMemoryManager, ExtractMode
from tulip_memory.manager.block import strip_memory_blocks
from tulip_memory.manager.memory import (
    Memory,
    MemoryScope,
    MemoryType,
    Namespace,
    NamespaceResolver,
    RunInfo,
)
from tulip_memory.messages import Message
from tulip_memory.state import AgentState
from tulip_memory.store.base import BaseStore, BatchItem
from tulip_memory.store.items import StoreItem
from tulip_memory.store.validation import validate_namespace

logger = logging.getLogger(__name__)

#: ``async (messages) -> memories``: replaces the built-in heuristic when given.
ExtractFn = Callable[[list[Message]], Awaitable[list[Memory]]]

# Scopes by manager id: one variable for every manager, copied (never mutated) on set.
_SCOPES: ContextVar[Mapping[int, MemoryScope]] = ContextVar(
    "tulip_memory_scopes", default=MappingProxyType({})
)
#: Most keys a type's namespace is listed with when pruning.
_LIST_LIMIT = 10_000
_EPOCH = datetime.min.replace(tzinfo=UTC)


class LLMMemoryManager(BaseMemoryManager):
    """Memory manager backed by any :class:`~tulip_memory.store.BaseStore`.

    Extraction uses ``extract_fn`` when given (e.g. an
    :class:`~tulip_memory.extract.LLMExtractor`), else the offline heuristic.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        extract_fn: ExtractFn | None = None,
        namespace_prefix: tuple[str, ...] = ("tulip_memory",),
        max_memories: int = 50,
        retrieve_limit: int = 20,
        extract_mode: ExtractMode = "inline",
        max_concurrent_extractions: int = 4,
        namespace_resolver: NamespaceResolver | None = None,
    ) -> None:
        if extract_mode not in ("inline", "background"):
            raise ValueError(f"extract_mode must be 'inline' or 'background', got {extract_mode!r}")
        if max_concurrent_extractions < 1:
            raise ValueError("max_concurrent_extractions must be at least 1")
        if max_memories < 1:
            raise ValueError("max_memories must be at least 1")
        self.extract_mode = extract_mode
        self.max_concurrent_extractions = max_concurrent_extractions
        self.store = store
        self.extract_fn = extract_fn
        self.namespace_prefix = validate_namespace(namespace_prefix)
        self.max_memories = max_memories
        self.retrieve_limit = retrieve_limit
        self.namespace_resolver = namespace_resolver
        self._last_stamp = _EPOCH

    # -- scope ----------------------------------------------------------------------

    @property
    def active_namespace(self) -> Namespace:
        """The prefix the current call reads and writes under."""
        scope = _SCOPES.get().get(id(self))
        return self.namespace_prefix if scope is None else scope.namespace

    @property
    def active_recall(self) -> tuple[Namespace, ...]:
        """Every prefix a recall in the current scope reads, the active namespace first."""
        scope = _SCOPES.get().get(id(self))
        if scope is None:
            return (self.namespace_prefix,)
        return (scope.namespace, *scope.recall)

    @contextmanager
    def scoped(
        self, namespace_prefix: tuple[str, ...], *, recall: Sequence[tuple[str, ...]] = ()
    ) -> Iterator[None]:
        """Run calls (and background jobs scheduled) in the block under
        ``namespace_prefix``, also recalling from the read-only ``recall`` prefixes of
        the same tenant; another tenant's prefix is dropped with a warning."""
        prefix = validate_namespace(namespace_prefix)
        scope = MemoryScope(prefix, recall=_same_tenant(prefix, recall))
        token = _SCOPES.set(MappingProxyType({**_SCOPES.get(), id(self): scope}))
        try:
            yield
        finally:
            _SCOPES.reset(token)

    # -- lifecycle ------------------------------------------------------------------

    async def on_session_start(self, state: AgentState) -> AgentState:
        """Inject this run's memories, recalled from its scope in one recall."""
        scope = self._resolve_scope(state)
        if scope is None:
            return state.with_messages(strip_memory_blocks(state.messages))
        with self.scoped(scope.namespace, recall=scope.recall):
            return await super().on_session_start(state)

    async def on_session_end(self, state: AgentState) -> None:
        """Extract and save this run's memories into its own namespace (never a recall one)."""
        scope = self._resolve_scope(state)
        if scope is None:
            return
        with self.scoped(scope.namespace):
            await super().on_session_end(state)

    # -- the contract ---------------------------------------------------------------

    async def extract(self, messages: list[Message]) -> list[Memory]:
        """``extract_fn`` when given, else the offline heuristic."""
        if self.extract_fn is not None:
            return await self.extract_fn(messages)
        return heuristic.heuristic_extract(messages)

    async def retrieve(
        self,
        limit: int | None = None,
        *,
        query: str | None = None,
        namespaces: Sequence[tuple[str, ...]] | None = None,
    ) -> list[Memory]:
        """Stored memories across every type: with ``query``, each type's best matches
        interleaved rank by rank, then topped up with the most recent; without, the
        most recent. ``namespaces`` (one tenant) defaults to :attr:`active_recall`.

        Raises:
            ValueError: ``namespaces`` span more than one tenant.
        """
        top = self.retrieve_limit if limit is None else limit
        prefixes = self._recall_prefixes(namespaces)
        if top <= 0 or not prefixes:
            return []
        targets = [(*p, t.value) for p in prefixes for t in MemoryType]
        ranked: list[StoreItem] = []
        if query and query.strip():
            ranked = interleave(await self._ranked(targets, query, top))
        recent = await self._recent(targets, max(top, self.max_memories))
        return memories_of(dedupe(ranked + recent))[:top]

    async def retrieve_relevant(
        self,
        query: str | None,
        limit: int | None = None,
        *,
        namespaces: Sequence[tuple[str, ...]] | None = None,
    ) -> list[Memory]:
        """Rank stored memories against ``query``; see :meth:`retrieve`."""
        return await self.retrieve(limit, query=query, namespaces=namespaces)

    async def save(self, memories: list[Memory]) -> None:
        """Upsert by ``(type, key)`` into the active namespace, stamping ``updated_at``
        (on a copy), then prune each touched type to ``max_memories``, oldest first."""
        if not memories:
            return
        batch: dict[tuple[MemoryType, str], BatchItem] = {}
        for memory in memories:
            stamp = self._next_stamp().isoformat()
            value = memory.to_store_value()
            value["metadata"] = {**value["metadata"], "updated_at": stamp}
            metadata = {"type": memory.type.value, "updated_at": stamp}
            batch[(memory.type, memory.key)] = (self._ns(memory.type), memory.key, value, metadata)
        await self.store.put_batch(list(batch.values()))
        for memory_type in dict.fromkeys(t for t, _ in batch):
            await self._prune(memory_type)

    # -- internals ------------------------------------------------------------------

    def _resolve_scope(self, state: AgentState) -> MemoryScope | None:
        """This run's scope; ``None`` (no memory at all) if the resolver says so or fails."""
        if self.namespace_resolver is None:
            current = _SCOPES.get().get(id(self))
            return current if current is not None else MemoryScope(self.namespace_prefix)
        thread_id = state.metadata.get("thread_id")
        run = RunInfo(
            metadata=dict(state.metadata),
            thread_id=thread_id if isinstance(thread_id, str) else None,
        )
        try:
            return as_scope(self.namespace_resolver(run))
        except Exception:
            logger.warning("namespace resolver failed; the run has no memory", exc_info=True)
            return None

    def _recall_prefixes(self, namespaces: Sequence[tuple[str, ...]] | None) -> list[Namespace]:
        if namespaces is None:
            return list(self.active_recall)
        prefixes = [validate_namespace(p) for p in namespaces]
        if len({p[0] for p in prefixes}) > 1:
            raise ValueError(
                "retrieve(namespaces=...) spans more than one tenant (first element); "
                "recall one tenant per call"
            )
        return prefixes

    def _ns(self, memory_type: MemoryType) -> Namespace:
        return (*self.active_namespace, memory_type.value)

    def _extraction_order_key(self) -> Hashable:
        return self.active_namespace

    def _event_fields(self) -> dict[str, Any]:
        return {"namespace": list(self.active_namespace)}

    def _next_stamp(self) -> datetime:
        # Strictly increasing, so "oldest" is well defined even within one save().
        now = datetime.now(UTC)
        self._last_stamp = max(now, self._last_stamp + timedelta(microseconds=1))
        return self._last_stamp

    async def _ranked(
        self, targets: list[Namespace], query: str, top: int
    ) -> list[list[StoreItem]]:
        try:
            return await self.store.search_many(targets, query=query, limit=top)
        except StoreCapabilityError:
            return []

    async def _recent(self, targets: list[Namespace], per_target: int) -> list[StoreItem]:
        try:
            found = await self.store.search_many(targets, query=None, limit=per_target)
            items = [item for items in found for item in items]
        except StoreCapabilityError:
            items = await self._listed(targets, per_target)
        return sorted(items, key=updated_at, reverse=True)

    async def _listed(self, targets: list[Namespace], per_target: int) -> list[StoreItem]:
        """Every item of ``targets`` read by key: for stores that cannot search."""
        items: list[StoreItem] = []
        for ns in targets:
            for key in await self.store.list_keys(ns, limit=_LIST_LIMIT):
                item = await self.store.get_item(ns, key)
                if item is not None:
                    items.append(item)
        return items

    async def _prune(self, memory_type: MemoryType) -> None:
        ns = self._ns(memory_type)
        keys = await self.store.list_keys(ns, limit=_LIST_LIMIT)
        excess = len(keys) - self.max_memories
        if excess <= 0:
            return
        values = await self.store.get_batch([(ns, k) for k in keys])
        oldest = sorted(keys, key=lambda k: (stamp_of(values.get((ns, k))), k))[:excess]
        for key in oldest:
            await self.store.delete(ns, key)


def as_scope(resolved: Sequence[str] | MemoryScope | None) -> MemoryScope | None:
    """A resolver's answer as a scope (``None`` stays ``None``); raises if malformed."""
    if resolved is None or isinstance(resolved, MemoryScope):
        return resolved
    if isinstance(resolved, str):
        raise TypeError(f"a namespace is a tuple of strings, not the string {resolved!r}")
    return MemoryScope(tuple(resolved))


def _same_tenant(prefix: Namespace, recall: Sequence[tuple[str, ...]]) -> tuple[Namespace, ...]:
    kept: list[Namespace] = []
    for p in (validate_namespace(r) for r in recall):
        if p[0] != prefix[0]:
            logger.warning("recall prefix %r belongs to another tenant than %r; dropped", p, prefix)
        elif p != prefix and p not in kept:
            kept.append(p)
    return tuple(kept)


def interleave(rankings: Sequence[Sequence[StoreItem]]) -> list[StoreItem]:
    """Rank 1 of every list, then rank 2, ...: scores of separate rankings don't compare."""
    depth = max((len(r) for r in rankings), default=0)
    return [r[rank] for rank in range(depth) for r in rankings if rank < len(r)]


def dedupe(items: Sequence[StoreItem]) -> list[StoreItem]:
    """``items`` without repeats of a stored item, first occurrence kept."""
    seen: set[tuple[Namespace, str]] = set()
    out: list[StoreItem] = []
    for item in items:
        ident = (tuple(item.namespace), item.key)
        if ident not in seen:
            seen.add(ident)
            out.append(item)
    return out


def memories_of(items: Sequence[StoreItem]) -> list[Memory]:
    """The memories among ``items``; values that are not memories are skipped."""
    out: list[Memory] = []
    for item in items:
        try:
            out.append(Memory.from_store_value(item.value))
        except (KeyError, TypeError, ValueError, AttributeError):
            logger.warning("skipping a store value that is not a memory: %r", item.key)
    return out


def stamp_of(value: Any) -> datetime:
    """The ``updated_at`` a saved memory value carries, or the epoch if none."""
    try:
        parsed = datetime.fromisoformat(value["metadata"]["updated_at"])
    except (KeyError, TypeError, ValueError):
        return _EPOCH
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def updated_at(item: StoreItem) -> datetime:
    """When a stored memory was last saved: its own stamp, else the store's."""
    stamp = stamp_of(item.value)
    if stamp != _EPOCH:
        return stamp
    return item.updated_at if item.updated_at.tzinfo else item.updated_at.replace(tzinfo=UTC)
