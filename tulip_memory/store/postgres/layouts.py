"""A store's view of its table's vector slots: who reads which, and each slot's embedder.

Layouts are cached per tenant and refreshed by every statement that reads the layout
(the first statement of each recall and write transaction), so a cached layout is a
guess that saves a model call, never a decision: reads and writes act on the layout
their own transaction read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tulip_memory.embeddings import BaseEmbedding, embedder_from_config
from tulip_memory.embeddings.allowlist import EmbedderAllowlist
from tulip_memory.embeddings.base import Vectors
from tulip_memory.errors import EmbeddingError
from tulip_memory.store.postgres.slots import ALL_TENANTS, DEFAULT_LAYOUT, Layout, SlotInfo
from tulip_memory.store.ranking import vector_or_none

#: The model label of a slot written without vectors (the store's substring-only mode).
NO_MODEL = "none"
#: Builds the embedder of a slot from its model string, width and API base.
EmbedderResolver = Callable[[str, int, str | None], BaseEmbedding]


def resolve_embedder(spec: str, dim: int, api_base: str | None) -> BaseEmbedding:
    """The default resolver: :func:`~tulip_memory.embeddings.embedder_from_config`."""
    return embedder_from_config(spec, dimension=dim, api_base=api_base)


class Layouts:
    """Slots of one table and the layouts of the tenants this process has met."""

    def __init__(
        self,
        own: BaseEmbedding | None,
        resolve: EmbedderResolver,
        slots_sql: str,
        allowed: EmbedderAllowlist,
    ) -> None:
        self._own = own
        self._resolve = resolve
        self.allowed = allowed
        self._slots_sql = slots_sql
        self._slots: dict[str, SlotInfo] = {}
        self._layouts: dict[str, Layout] = {}
        self._embedders: dict[str, BaseEmbedding | None] = {}
        self._written: dict[str, tuple[int, Layout]] = {}

    def cached(self, tenant: str) -> Layout:
        """The tenant's last known layout (else the all-tenants one, else the default)."""
        return self._layouts.get(tenant) or self._layouts.get(ALL_TENANTS) or DEFAULT_LAYOUT

    def for_write(self, tenant: str, version: int) -> Layout | None:
        """The tenant's layout as a write transaction read it at ``version``."""
        found = self._written.get(tenant)
        return found[1] if found is not None and found[0] == version else None

    def note_write(self, tenant: str, version: int, layout: Layout) -> None:
        self._written[tenant] = (version, layout)

    async def note(self, conn: Any, tenant: str, layout: Layout) -> Layout:
        """Remember ``layout`` as read in a transaction; learn slots it names."""
        self._layouts[tenant] = layout
        if any(s not in self._slots for s in (*layout.write, layout.read)):
            await self.load(conn)
        return layout

    async def load(self, conn: Any) -> None:
        rows = await conn.fetch(self._slots_sql)
        self._slots = {r["slot"]: SlotInfo.from_row(r) for r in rows}

    async def info(self, slot: str, connect: Callable[[], Awaitable[Any]]) -> SlotInfo:
        """The slot's model; reads the registry (through ``connect``) if unknown."""
        if slot not in self._slots:
            pool = await connect()
            async with pool.acquire() as conn:
                await self.load(conn)
        try:
            return self._slots[slot]
        except KeyError:
            raise LookupError(f"vector slot {slot!r} is not in the table's registry") from None

    def width(self, slot: str) -> int | None:
        info = self._slots.get(slot)
        return None if info is None else info.dim

    def embedder(self, info: SlotInfo) -> BaseEmbedding | None:
        """The embedder of a slot: the store's own for the original slot or when it is
        the slot's model, else one built from the slot's model string and API base,
        if :attr:`allowed` (see :mod:`~tulip_memory.embeddings.allowlist`)."""
        if info.slot in self._embedders:
            return self._embedders[info.slot]
        own = self._own
        if (own.model if own is not None else NO_MODEL) == info.model:
            chosen = own
        elif info.spec is None:
            mine = own.model if own is not None else NO_MODEL
            raise EmbeddingError(
                f"vector slot {info.slot!r} holds vectors of {info.model!r}, which cannot "
                f"be built from a model string, and this store embeds with {mine!r}: "
                f"configure {info.model!r} (TULIP_EMBED_MODEL) until a reindex moves "
                "the table off it"
            )
        else:
            self.allowed.check(info.slot, info.spec, info.api_base)
            try:
                chosen = self._resolve(info.spec, info.dim, info.api_base)
            except Exception as e:
                raise EmbeddingError(
                    f"vector slot {info.slot!r} holds vectors of {info.spec!r} "
                    f"({info.dim} dimensions), but no embedder can be built for it: {e}"
                ) from e
            if chosen.dimension != info.dim:
                raise EmbeddingError(
                    f"{info.spec!r} now embeds {chosen.dimension}-wide vectors; slot "
                    f"{info.slot!r} holds {info.dim}-wide ones"
                )
        self._embedders[info.slot] = chosen
        return chosen

    async def encode(
        self, slot: str, texts: Sequence[str], connect: Callable[[], Awaitable[Any]]
    ) -> list[Vectors | None]:
        """``texts`` in ``slot``'s model, one embedder call; ``None`` for no vector."""
        embedder = self.embedder(await self.info(slot, connect))
        if embedder is None or not texts:
            return [None] * len(texts)
        encoded = await embedder.aembed(list(texts))
        return [vector_or_none(encoded[i]) for i in range(len(texts))]
