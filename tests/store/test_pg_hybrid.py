"""PgMemory's hybrid search: bm25 over a generated tsvector and exact cosine, fused in
one statement (``search``, ``search_many``, ``search_across``, ``search_turns``).

The fused score is a pure function tested first; then the degenerate cases (no
vectors, no lexical match), a rare keyword far in vector space, text search
configurations, non-English and hostile text, the migration of an existing table, and
invariant 6 on a table where the namespace is a tiny fraction, against a ranking
computed here in Python from the documented formula.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np
import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import BaseEmbedding, HashingEmbedder, HRREncoder
from tulip_memory.embeddings.base import Vectors
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import WORD_HASHING, HybridRanking
from tulip_memory.store.postgres import slots
from tulip_memory.store.postgres import store as pg_store_module
from tulip_memory.store.postgres.admin import as_owner
from tulip_memory.store.postgres.family import apply_migrations
from tulip_memory.store.postgres.migrations import MEMORIES, names
from tulip_memory.store.postgres.store import TurnsIn
from tulip_memory.store.postgres.writer import TurnRow
from tulip_memory.store.validation import MAX_QUERY_CHARS, MAX_QUERY_TERMS

LEXICAL = HybridRanking(lexical_weight=1.0, vector_weight=0.0)
VECTOR = HybridRanking(lexical_weight=0.0, vector_weight=1.0)


def fresh_table() -> str:
    return f"hyb_{uuid.uuid4().hex[:10]}"


class TableEmbedder(BaseEmbedding):
    """Vectors looked up by exact text: a semantic space the test lays out by hand."""

    def __init__(self, table: Mapping[str, Sequence[float]], dimension: int = 3) -> None:
        self.table = dict(table)
        self._dimension = dimension

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model(self) -> str:
        return "table"

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.calls: list[list[str]] = []

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return self.embed(texts)


async def write_turns(store: PgMemory, ns: tuple[str, ...], texts: Sequence[str]) -> None:
    rows = [TurnRow(i, t, {"text": t}, {"i": i}) for i, t in enumerate(texts)]
    _, prepared = await store.prepare_event([], TurnsIn(ns, "thread", "event-1", rows))
    assert prepared is not None
    async with store.transaction(ns[0]) as tx:
        await tx.write_turns(prepared)


# -- the fused score, a pure function ---------------------------------------------------


def test_fused_score_is_the_documented_formula() -> None:
    r = HybridRanking(lexical_weight=0.3, vector_weight=0.7)
    assert r.score(2.0, 4.0, 0.5) == pytest.approx(0.3 * 0.5 + 0.7 * 0.75)
    assert r.score(4.0, 4.0, 0.0) == pytest.approx(1.0)  # best on both sides
    assert r.score(None, 4.0, 0.0) == pytest.approx(0.7)  # no lexical match
    assert r.score(4.0, 4.0, None) == pytest.approx(0.3)  # no vector
    assert r.score(None, None, None) == 0.0
    # An opposite vector (distance 2) adds nothing, like no vector at all.
    assert r.score(None, None, 2.0) == 0.0
    # Scale-free on the lexical side: only bm25 relative to the scope's best counts.
    assert r.score(1.0, 2.0, 1.0) == pytest.approx(r.score(50.0, 100.0, 1.0))


def test_a_zero_weight_turns_a_side_off() -> None:
    assert LEXICAL.score(3.0, 4.0, 0.0) == pytest.approx(0.75)
    assert LEXICAL.score(None, 4.0, 0.0) == 0.0
    assert VECTOR.score(4.0, 4.0, 1.0) == pytest.approx(0.5)
    distances = [0.1, 0.4, 0.4, 1.3, 1.9]
    fused = [VECTOR.score(None, None, d) for d in distances]
    assert fused == sorted(fused, reverse=True)  # exact cosine order


def test_defaults_and_the_word_hashing_ranking() -> None:
    default = HybridRanking()
    assert (default.lexical_weight, default.vector_weight, default.k1, default.b) == (
        0.2,
        0.8,
        1.2,
        0.4,
    )
    assert WORD_HASHING.lexical_weight > WORD_HASHING.vector_weight
    # With the word-hashing weights a lexical best match outranks any vector alone.
    assert WORD_HASHING.score(1.0, 1.0, 2.0) > WORD_HASHING.score(None, 1.0, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lexical_weight": -0.1}, "finite and >= 0"),
        ({"vector_weight": math.nan}, "finite and >= 0"),
        ({"vector_weight": math.inf}, "finite and >= 0"),
        ({"k1": -1.0}, "finite and >= 0"),
        ({"lexical_weight": True}, "finite and >= 0"),
        ({"lexical_weight": "1"}, "finite and >= 0"),
        ({"lexical_weight": 0.0, "vector_weight": 0.0}, "at least one side"),
        ({"b": 1.5}, r"within \[0, 1\]"),
        ({"b": -0.1}, r"within \[0, 1\]"),
    ],
)
def test_bad_rankings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HybridRanking(**kwargs)


def test_default_ranking_follows_the_encoder(pg_dsn: str) -> None:
    assert app_store(pg_dsn).ranking == WORD_HASHING  # HRR
    assert app_store(pg_dsn, embedder=HashingEmbedder(64)).ranking == WORD_HASHING
    assert app_store(pg_dsn, embedder=TableEmbedder({})).ranking == HybridRanking()
    mine = HybridRanking(lexical_weight=0.5, vector_weight=0.5)
    assert app_store(pg_dsn, ranking=mine).ranking is mine
    with pytest.raises(TypeError, match="HybridRanking"):
        PgMemory(pg_dsn, ranking={"lexical_weight": 1.0})  # type: ignore[arg-type]


# -- text search configuration ---------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["english; DROP TABLE x", "English", "eng'lish", "a b", "", "a.b.c", "x--", 7, "english\n"],
)
def test_bad_text_search_config_names_are_refused(pg_dsn: str, bad: Any) -> None:
    with pytest.raises(ValueError, match="not a text search configuration name"):
        app_store(pg_dsn, text_search_config=bad)


async def test_an_unknown_configuration_is_refused_at_first_use(pg_dsn: str, tenant: str) -> None:
    table = fresh_table()
    store = app_store(pg_dsn, table=table, text_search_config="klingon")
    try:
        with pytest.raises(ValueError, match="'klingon' is not a text search configuration"):
            await store.put((tenant,), "k", "v")
    finally:
        await store.close()
    conn = await asyncpg.connect(pg_dsn)
    try:  # refused before anything was created
        assert await conn.fetchval("SELECT to_regclass($1)", f"public.{table}") is None
    finally:
        await conn.close()


async def test_a_table_keeps_the_configuration_it_was_indexed_with(
    pg_dsn: str, tenant: str
) -> None:
    table = fresh_table()
    first = app_store(pg_dsn, table=table)
    await first.put((tenant,), "k", "running shoes")
    await first.close()
    other = app_store(pg_dsn, table=table, text_search_config="simple")
    with pytest.raises(ValueError, match="configuration 'english' but this store was given"):
        await other.get((tenant,), "k")
    await other.close()
    same = app_store(pg_dsn, table=table, text_search_config="pg_catalog.english")
    try:
        assert [i.key for i in await same.search((tenant,), "run")] == ["k"]
    finally:
        await same.close()


async def test_stemming_and_stop_words_follow_the_configuration(
    postgres: Postgres, pg_dsn: str, tenant: str
) -> None:
    # A configuration of one's own: English stemming, no stop words.
    config = f"public.keep_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(postgres.admin_dsn)
    try:
        await admin.execute(
            f"CREATE TEXT SEARCH DICTIONARY {config}_stem (TEMPLATE = snowball, Language = english)"
        )
        await admin.execute(f"CREATE TEXT SEARCH CONFIGURATION {config} (COPY = english)")
        await admin.execute(
            f"ALTER TEXT SEARCH CONFIGURATION {config} ALTER MAPPING FOR asciiword, word, "
            f"asciihword, hword, hword_asciipart, hword_part WITH {config}_stem"
        )
    finally:
        await admin.close()
    ns = (tenant, "runs")
    found: dict[str, list[list[str]]] = {}
    for name in ("english", "simple", config):
        s = app_store(pg_dsn, table=fresh_table(), text_search_config=name, ranking=LEXICAL)
        try:
            await s.put(ns, "a", "she was running, running in the park")
            await s.put(ns, "b", "the the the and the")
            await s.put(ns, "c", "runs daily")
            found[name] = [[i.key for i in await s.search(ns, q)] for q in ("run", "the")]
        finally:
            await s.close()
    # Without a lexical match (and no vector side) rows come most recent first.
    recent = ["c", "b", "a"]
    assert found["english"] == [["a", "c", "b"], recent]  # stems; "the" is a stop word
    assert found["simple"] == [recent, ["b", "a", "c"]]  # neither
    assert found[config] == [["a", "c", "b"], ["b", "a", "c"]]  # stems, keeps "the"


# -- degenerate cases --------------------------------------------------------------------


async def test_without_vectors_search_ranks_lexically(
    pg_dsn: str, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_store_module, "_numpy", lambda: None)
    with pytest.warns(RuntimeWarning, match="substring"):
        s = app_store(pg_dsn, table=fresh_table())
    ns = (tenant, "facts")
    try:
        await s.put(ns, "once", "green tea in the morning")
        await s.put(ns, "twice", "green tea, then more green tea")
        await s.put(ns, "sub", "evergreen hedges")
        await s.put(ns, "other", "coffee at noon")
        # search keeps its substring-mode contract: matching rows only, bm25 first,
        # then rows that match only as a substring.
        assert [i.key for i in await s.search(ns, "green tea")] == ["twice", "once"]
        assert [i.key for i in await s.search(ns, "green")] == ["twice", "once", "sub"]
        across = await s.search_across([ns, (tenant, "empty")], "green tea", limit=10)
        assert [h.item.key for h in across] == ["twice", "once", "other", "sub"]  # complete
        assert all(h.distance is None and h.score == 0.0 for h in across)
        turns = ["the weather today", "green tea twice, green tea", "tea later"]
        await write_turns(s, ns, turns)
        hits = await s.search_turns(ns, "green tea", top_k=10)
        assert [h.text for h in hits] == [turns[1], turns[2], turns[0]]
        assert all(h.score == 0.0 for h in hits)
    finally:
        await s.close()


async def test_a_lexical_only_ranking_never_embeds_the_query(pg_dsn: str, tenant: str) -> None:
    embedder = CountingEmbedder()
    s = app_store(pg_dsn, table=fresh_table(), embedder=embedder, ranking=LEXICAL)
    ns = (tenant, "facts")
    try:
        await s.put_batch([(ns, "tea", "green tea", None), (ns, "jazz", "cool jazz", None)])
        calls = len(embedder.calls)
        assert [i.key for i in await s.search(ns, "jazz")] == ["jazz", "tea"]
        assert [h.item.key for h in await s.search_across([ns], "tea")] == ["tea", "jazz"]
        assert await s.search_turns(ns, "tea") == []
        assert len(embedder.calls) == calls
    finally:
        await s.close()


def cosine_order(emb: BaseEmbedding, texts: Mapping[str, str], query: str) -> list[str]:
    """Keys by exact cosine similarity; equal ones newest first (written in order)."""
    keys = list(texts)
    m = emb.embed([texts[k] for k in keys])
    q = emb.embed([query])[0]
    sims = np.round((m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q)), 6)
    return [keys[i] for i in np.lexsort((-np.arange(len(keys)), -sims))]


@pytest.mark.parametrize("query", ["which of these was it", "was it then", "zebra of these"])
async def test_a_query_without_lexical_match_ranks_by_vectors(
    pg_dsn: str, tenant: str, query: str
) -> None:
    emb = HashingEmbedder(384)
    s = app_store(pg_dsn, table=fresh_table(), embedder=emb, ranking=HybridRanking())
    ns = (tenant, "facts")
    texts = {
        "a": "it was the blue one of these",
        "b": "these were the days",
        "c": "which one was it then",
        "d": "a quiet evening of chess",
        "e": "of course it was",
    }
    try:
        await s.put_batch([(ns, k, v, None) for k, v in texts.items()])
        expected = cosine_order(emb, texts, query)
        assert [i.key for i in await s.search(ns, query)] == expected
        hits = await s.search_across([ns], query)
        assert [h.item.key for h in hits] == expected
        await write_turns(s, ns, list(texts.values()))
        turns = await s.search_turns(ns, query, top_k=10)
        assert [h.text for h in turns] == [texts[k] for k in expected]
        assert [h.score for h in turns] == sorted((h.score for h in turns), reverse=True)
    finally:
        await s.close()


# -- a rare keyword far in vector space ------------------------------------------------


def _unit(angle: float) -> list[float]:
    """A unit vector at ``angle`` from the query's [1, 0, 0], in the x-y plane."""
    return [math.cos(angle), math.sin(angle), 0.0]


QUERY = "where did my parcel to zanzibar go"
ANSWER = "the courier left it in zanzibar"
FILLERS = {f"note {i} on errands and the weather": _unit(1.15 + 0.01 * i) for i in range(20)}


def rare_keyword_embedder() -> TableEmbedder:
    # Every filler is nearer the query (cosine 0.23-0.41) than the answer (cosine 0).
    return TableEmbedder({QUERY: [1.0, 0.0, 0.0], ANSWER: [0.0, 0.0, 1.0], **FILLERS})


@pytest.mark.parametrize(
    ("ranking", "place"), [(VECTOR, 20), (HybridRanking(), 0), (WORD_HASHING, 0)]
)
async def test_a_rare_keyword_far_in_vector_space_is_found(
    pg_dsn: str, tenant: str, ranking: HybridRanking, place: int
) -> None:
    s = app_store(pg_dsn, table=fresh_table(), embedder=rare_keyword_embedder(), ranking=ranking)
    ns = (tenant, "notes")
    try:
        items = [(ns, f"f{i}", text, None) for i, text in enumerate(FILLERS)]
        await s.put_batch([*items, (ns, "answer", ANSWER, None)])
        keys = [i.key for i in await s.search(ns, QUERY, limit=50)]
        assert len(keys) == 21 and keys.index("answer") == place
        across = [h.item.key for h in await s.search_across([ns], QUERY, limit=50)]
        assert across == keys
        await write_turns(s, ns, [*FILLERS, ANSWER])
        turns = [h.text for h in await s.search_turns(ns, QUERY, top_k=50)]
        assert len(turns) == 21 and turns.index(ANSWER) == place
    finally:
        await s.close()


# -- non-English and hostile text ------------------------------------------------------


NON_ENGLISH = {
    "de": "Der Straßenbahnfahrer fährt schnell durch München",
    "ru": "Кошка спит на диване",
    "ja": "東京で寿司を食べた",
    "fr": "un café crème et une crème brûlée",
    "emoji": "🍣🍣 sushi night 🎉",
}


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("fährt", "de"),
        ("München", "de"),
        ("кошка", "ru"),
        ("東京で寿司を食べた", "ja"),
        ("brûlée", "fr"),
        ("sushi 🍣", "emoji"),
    ],
)
async def test_non_english_text_does_not_break_full_text_search(
    pg_dsn: str, tenant: str, query: str, first: str
) -> None:
    s = app_store(pg_dsn, table=fresh_table(), embedder=HashingEmbedder(64))
    ns = (tenant, "intl")
    try:
        await s.put_batch([(ns, k, v, None) for k, v in NON_ENGLISH.items()])
        found = [i.key for i in await s.search(ns, query)]
        assert found[0] == first and sorted(found) == sorted(NON_ENGLISH)
        await write_turns(s, ns, list(NON_ENGLISH.values()))
        turns = await s.search_turns(ns, query, top_k=10)
        assert turns[0].text == NON_ENGLISH[first] and len(turns) == len(NON_ENGLISH)
    finally:
        await s.close()


async def test_a_language_configuration_stems_its_language(pg_dsn: str, tenant: str) -> None:
    for config, row, query in [
        ("german", "Die Häuser am See", "Haus"),
        ("russian", "Кошки", "кошка"),
    ]:
        s = app_store(pg_dsn, table=fresh_table(), text_search_config=config, ranking=LEXICAL)
        try:
            await s.put((tenant,), "hit", row)
            await s.put((tenant,), "miss", "nothing alike")
            assert [i.key for i in await s.search((tenant,), query)] == ["hit", "miss"]
        finally:
            await s.close()


HOSTILE = [
    "!tea & (coffee | 'jazz')",
    "tea:* <-> coffee <2> jazz",
    "'''",
    "\\'\\' \\\\",
    "'; DROP TABLE x; --",
    "\x00",
    "tea\x00jazz",
    "\\",
    '"unterminated',
    "-tea or -jazz",
    "   ",
    "!!! ::: &&& |||",
    "tea " * 5000,
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
async def test_hostile_query_text_is_safe(pg_dsn: str, tenant: str, query: str) -> None:
    s = app_store(pg_dsn, table=fresh_table(), embedder=HashingEmbedder(64))
    ns = (tenant, "facts")
    texts = {"tea": "green tea", "jazz": "cool jazz", "coffee": "black coffee"}
    try:
        await s.put_batch([(ns, k, v, None) for k, v in texts.items()])
        await write_turns(s, ns, list(texts.values()))
        assert len(await s.search(ns, query)) == 3
        assert [len(r) for r in await s.search_many([ns, (tenant, "none")], query)] == [3, 0]
        assert len(await s.search_across([ns], query)) == 3
        assert len(await s.search_turns(ns, query, top_k=10)) == 3
        assert sorted(await s.list_keys(ns)) == sorted(texts)
    finally:
        await s.close()


async def test_a_query_keeps_its_first_distinct_terms(pg_dsn: str, tenant: str) -> None:
    # However many words a query holds, its lexical side is its first MAX_QUERY_TERMS
    # distinct lexemes (each is an index read): a word past them matches nothing.
    s = app_store(pg_dsn, table=fresh_table(), embedder=HashingEmbedder(64), ranking=LEXICAL)
    ns = (tenant, "facts")
    filler = [f"w{i}x" for i in range(MAX_QUERY_TERMS)]
    try:
        await s.put(ns, "zebra", "a zebra crossing")
        await s.put(ns, "apple", "an apple tree")  # newer: first when nothing matches
        await write_turns(s, ns, ["a zebra crossing", "an apple tree"])
        for words, first in ((["zebra", *filler], "zebra"), ([*filler, "zebra"], "apple")):
            query = " ".join(words + filler)  # repeats add no term
            assert (await s.search(ns, query))[0].key == first
            assert (await s.search_across([ns], query))[0].item.key == first
            turns = await s.search_turns(ns, query, top_k=2)
            assert turns[0].text.split()[1] == first
    finally:
        await s.close()


async def test_oversized_and_mistyped_arguments_are_refused(pg_dsn: str, tenant: str) -> None:
    s = app_store(pg_dsn, table=fresh_table(), embedder=HashingEmbedder(64))
    ns = (tenant, "facts")
    huge = "tea " * (MAX_QUERY_CHARS // 4) + "x"
    try:
        await s.put(ns, "tea", "green tea")
        for search in (
            lambda q: s.search(ns, q),
            lambda q: s.search_many([ns], q),
            lambda q: s.search_across([ns], q),
            lambda q: s.search_turns(ns, q),
        ):
            with pytest.raises(ValueError, match="32768-character limit"):
                await search(huge)
            with pytest.raises(TypeError, match="query must be a str"):
                await search(b"tea")
            assert len(await search(huge[:MAX_QUERY_CHARS])) <= 1  # the limit itself is fine
        with pytest.raises(ValueError, match="finite"):
            await s.search_turns(ns, "tea", threshold=float("inf"))
        with pytest.raises(TypeError, match="threshold must be a number"):
            await s.search_turns(ns, "tea", threshold=True)
        for bad in (True, 2.5, "5"):
            with pytest.raises(TypeError, match="top_k must be an int"):
                await s.search_turns(ns, "tea", top_k=bad)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="limit must be an int"):
                await s.search_across([ns], "tea", limit=bad)  # type: ignore[arg-type]
        assert await s.search_across([ns], "tea", limit=-1) == []
        assert await s.search_turns(ns, "tea", top_k=-1) == []
    finally:
        await s.close()


async def test_quotes_inside_a_lexeme_reach_the_index_quoted(pg_dsn: str, tenant: str) -> None:
    # A URL token keeps its quote in the lexeme: the probe must quote it for tsquery.
    s = app_store(pg_dsn, table=fresh_table(), embedder=HashingEmbedder(64), ranking=LEXICAL)
    ns = (tenant, "links")
    try:
        await s.put(ns, "url", "see example.com/it's-here for the details")
        await s.put(ns, "other", "nothing to see")
        assert [i.key for i in await s.search(ns, "example.com/it's-here")] == ["url", "other"]
    finally:
        await s.close()


# -- migration -------------------------------------------------------------------------


async def old_table(
    admin_dsn: str, name: str, tenant: str, *, upto: int, turn: bool = False
) -> str:
    """``public.<name>`` migrated up to version ``upto`` only, holding one row of
    ``tenant`` (key ``old``: "runs every morning") and, with ``turn``, one turn; its
    qualified name."""
    table = f"public.{name}"
    placeholders = {"t": table, **names(name=name, dim=16, tsconfig="english")}
    async with as_owner(admin_dsn) as conn:
        await apply_migrations(conn, table, MEMORIES.steps(placeholders, upto=upto))
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", tenant)
            await conn.execute(
                f"INSERT INTO {table} (tenant, ns, key, value, content) "
                "VALUES ($1, $1, 'old', '\"runs every morning\"', 'runs every morning')",
                tenant,
            )
            if turn:
                await conn.execute(
                    f"""INSERT INTO {table}_turns (tenant, ns, thread_id, event_id, position,
                                                   text, turn)
                        VALUES ($1, $1, 'th', 'e0', 0, 'an old turn', '{{}}')""",
                    tenant,
                )
    return table


async def test_an_existing_table_gains_full_text_search(
    pg_dsn: str, postgres: Postgres, tenant: str
) -> None:
    name = fresh_table()
    table = await old_table(postgres.admin_dsn, name, tenant, upto=5)
    s = app_store(pg_dsn, table=name, dim=8)
    try:
        await s.put((tenant,), "new", "swims on sundays")
        assert [i.key for i in await s.search((tenant,), "running", limit=1)] == ["old"]
        conn = await asyncpg.connect(pg_dsn)
        try:
            versions = await conn.fetch(f"SELECT version FROM {table}_migrations ORDER BY 1")
            assert [r["version"] for r in versions] == MEMORIES.versions
            indexes = {
                r["indexname"]
                for r in await conn.fetch(
                    "SELECT indexname FROM pg_indexes WHERE tablename = ANY($1::text[])",
                    [f"{name}_post", f"{name}_turns_post"],
                )
            }
            assert {f"{name}_post_pkey", f"{name}_turns_post_pkey"} <= indexes
            async with conn.transaction():  # the row written before: copied by the migration
                await conn.execute("SELECT set_config('tulip.tenant', $1, true)", tenant)
                lexical = await conn.fetch(
                    f"SELECT key, lexeme FROM {table}_post ORDER BY key, lexeme"
                )
            assert [tuple(r) for r in lexical] == [
                ("new", "sunday"), ("new", "swim"), ("old", "everi"), ("old", "morn"),
                ("old", "run"),
            ]  # fmt: skip
            generated = await conn.fetchval(
                "SELECT count(*) FROM pg_attribute WHERE attname = 'tsv' "
                "AND attgenerated = 's' AND attrelid = ANY($1::regclass[])",
                [table, f"{table}_turns"],
            )
            assert generated == 2
        finally:
            await conn.close()
    finally:
        await s.close()


# -- invariant 6 with hybrid ranking ----------------------------------------------------

OTHER_ROWS = 60_000
TARGET_ROWS = 50
DIM = 8
HOSTILE_PLANNER = "enable_sort=off&enable_bitmapscan=off&enable_seqscan=off"
TOPICS = ["tea", "chess", "lisbon", "nursing", "jazz", "cycling", "python"]


def target_texts() -> dict[str, str]:
    return {
        f"m{i:02d}": (
            f"fact {i} about {TOPICS[i % 7]} and {TOPICS[(i * 3) % 7]} "
            + " ".join([TOPICS[(i * 5) % 7]] * (i % 4))
            + f" number {i % 5}"
        )
        for i in range(TARGET_ROWS)
    }


@dataclass
class BigTable:
    table: str
    app_dsn: str
    admin_dsn: str
    texts: dict[str, str]
    extra: dict[str, str]  # a second namespace of the target tenant

    def store(self, ranking: HybridRanking | None = None) -> PgMemory:
        dsn = self.app_dsn + ("&" if "?" in self.app_dsn else "?") + HOSTILE_PLANNER
        return app_store(dsn, table=self.table, dim=DIM, ranking=ranking)


MEM = ("target", "mem")
EXTRA = ("target", "extra")


@pytest.fixture(scope="module")
def big_table(postgres: Postgres) -> BigTable:
    extra = {f"x{i}": f"extra {TOPICS[i % 7]} note {i}" for i in range(10)}
    fx = BigTable(
        f"hybrid_{uuid.uuid4().hex[:8]}",
        postgres.app_dsn,
        postgres.admin_dsn,
        target_texts(),
        extra,
    )
    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever the test's is
        pool.submit(asyncio.run, _build(fx)).result()
    return fx


async def _build(fx: BigTable) -> None:
    table = f"public.{fx.table}"
    setup = app_store(fx.app_dsn, table=fx.table, dim=DIM)
    await setup.put(("warmup",), "k", "v")  # runs the migrations
    await setup.close()
    admin = await asyncpg.connect(fx.admin_dsn)
    try:
        # Other tenants' rows hold the query's words too: their text must not move a
        # target row's score (bm25 statistics are the scope's own).
        # Both HNSW indexes are built after the bulk load, not kept up row by row through
        # it (minutes), and small: the target's recall takes the exact path, the indexes
        # are what the hostile planner could reach for.
        await admin.execute(f"DROP INDEX public.{fx.table}_hnsw, public.{fx.table}_turns_hnsw")
        vector = (
            "(SELECT ('[' || string_agg((random() - 0.5)::text, ',') || ']') "
            f"FROM generate_series(1, {2 * DIM}) WHERE g > 0)::vector"
        )
        await admin.execute(
            f"""INSERT INTO {table} (tenant, ns, key, value, content, embedding)
            SELECT 'other' || (g % 200), 'other' || (g % 200) || chr(31) || 'mem',
                   'k' || g, '1'::jsonb, 'jazz and tea filler ' || (g % 7), {vector}
            FROM generate_series(1, {OTHER_ROWS}) g"""
        )
        await admin.execute(
            f"""INSERT INTO {table}_turns (tenant, ns, thread_id, event_id, position, text,
                                          turn, embedding)
            SELECT 'other' || (g % 200), 'other' || (g % 200) || chr(31) || 'mem', 't',
                   'e' || g, 0, 'jazz and tea filler ' || (g % 7), '{{}}'::jsonb, {vector}
            FROM generate_series(1, {OTHER_ROWS}) g"""
        )
        for on, index in (
            (table, f"{fx.table}_hnsw"),
            (f"{table}_turns", f"{fx.table}_turns_hnsw"),
        ):
            await admin.execute(
                f"CREATE INDEX {index} ON {on} {slots.ann_using('embedding', 2 * DIM)} "
                "WITH (m = 4, ef_construction = 16)"
            )
    finally:
        await admin.close()
    store = fx.store()
    try:
        await store.put_batch([(MEM, k, v, None) for k, v in fx.texts.items()])
        await store.put_batch([(EXTRA, k, v, None) for k, v in fx.extra.items()])
        await write_turns(store, MEM, list(fx.texts.values()))
    finally:
        await store.close()
    admin = await asyncpg.connect(fx.admin_dsn)
    try:
        await admin.execute(f"ANALYZE {table}")
        await admin.execute(f"ANALYZE {table}_turns")
    finally:
        await admin.close()


async def lexemes(admin_dsn: str, texts: Sequence[str]) -> list[dict[str, int]]:
    """Each text's lexemes and their counts under 'english': Postgres tokenises, the
    scoring below is ours."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        rows = await conn.fetch(
            "SELECT x.i, u.lexeme, cardinality(u.positions) AS tf "
            "FROM unnest($1::text[]) WITH ORDINALITY AS x(t, i), "
            "unnest(to_tsvector('english', x.t)) AS u",
            list(texts),
        )
    finally:
        await conn.close()
    out: list[dict[str, int]] = [{} for _ in texts]
    for r in rows:
        out[r["i"] - 1][r["lexeme"]] = r["tf"]
    return out


async def expected_scores(
    admin_dsn: str, texts: Mapping[str, str], query: str, ranking: HybridRanking
) -> dict[str, float]:
    """The documented formula, computed from scratch: bm25 (idf = ln(1 + (N - df +
    0.5) / (df + 0.5)), dl = distinct lexemes) over the scope's rows, normalised by
    its best, and (1 + cosine) / 2 of the HRR encodings."""
    keys = list(texts)
    docs = await lexemes(admin_dsn, [texts[k] for k in keys])
    terms = set((await lexemes(admin_dsn, [query]))[0])
    n, avgdl = len(docs), sum(len(d) for d in docs) / len(docs)
    df = {t: sum(1 for d in docs if t in d) for t in terms}
    k1, b = ranking.k1, ranking.b
    bm25 = [
        sum(
            math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            * d[t]
            * (k1 + 1)
            / (d[t] + k1 * (1 - b + b * len(d) / avgdl))
            for t in terms & d.keys()
        )
        for d in docs
    ]
    best = max(bm25)
    enc = HRREncoder(DIM)
    m = enc.embed([texts[k] for k in keys]).astype(np.float64)
    q = enc.embed([query])[0].astype(np.float64)
    cos = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return {
        k: ranking.lexical_weight * (bm25[i] / best if best else 0.0)
        + ranking.vector_weight * (1 + cos[i]) / 2
        for i, k in enumerate(keys)
    }


def assert_ranked(found: Sequence[str], scores: Mapping[str, float], limit: int) -> None:
    """``found`` is a best-first top ``limit`` of ``scores`` (ties within float error
    may come in either order) and complete."""
    assert len(found) == min(limit, len(scores)) and len(set(found)) == len(found)
    got = [scores[k] for k in found]
    # pgvector sums float4 products in float4: distances agree with ours to ~1e-7.
    assert all(a >= b - 1e-6 for a, b in itertools.pairwise(got))
    rest = [v for k, v in scores.items() if k not in set(found)]
    assert not rest or min(got) >= max(rest) - 1e-6


QUERIES = ["jazz and tea number 3", "chess chess lisbon", "which of these"]


@pytest.fixture(
    params=[WORD_HASHING, HybridRanking(), LEXICAL, VECTOR],
    ids=["word-hashing", "default", "lexical", "vector"],
)
async def big_store(big_table: BigTable, request: pytest.FixtureRequest) -> AsyncIterator[PgMemory]:
    s = big_table.store(request.param)
    yield s
    await s.close()


@pytest.mark.parametrize("limit", [1, 10, 49, 50, 200])
@pytest.mark.parametrize("query", QUERIES)
async def test_hybrid_search_is_complete_and_ranked_as_documented(
    big_table: BigTable, big_store: PgMemory, limit: int, query: str
) -> None:
    scores = await expected_scores(big_table.admin_dsn, big_table.texts, query, big_store.ranking)
    found = [i.key for i in await big_store.search(MEM, query, limit=limit)]
    assert_ranked(found, scores, limit)
    many = await big_store.search_many([MEM, ("target", "nothing-here")], query, limit=limit)
    assert [i.key for i in many[0]] == found and many[1] == []
    turns = await big_store.search_turns(MEM, query, top_k=limit)
    by_text = {v: k for k, v in big_table.texts.items()}
    assert_ranked([by_text[t.text] for t in turns], scores, limit)


@pytest.mark.parametrize("limit", [1, 10, 59, 60, 200])
async def test_search_across_is_complete_and_ranked_over_the_union(
    big_table: BigTable, big_store: PgMemory, limit: int
) -> None:
    query = "jazz and tea number 3"
    union = {**big_table.texts, **big_table.extra}
    scores = await expected_scores(big_table.admin_dsn, union, query, big_store.ranking)
    hits = await big_store.search_across([MEM, EXTRA], query, limit=limit)
    assert_ranked([h.item.key for h in hits], scores, limit)
