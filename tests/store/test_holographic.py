"""``HolographicStore`` beyond the shared contract: durability, SQLite specifics,
concurrency, text in any script, hostile query syntax, fused ranking, no numpy."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tulip_memory.embeddings import HRREncoder
from tulip_memory.errors import StoreCapabilityError
from tulip_memory.store import holographic
from tulip_memory.store.holographic import (
    HolographicStore,
    fold,
    fts_query,
    lexical_terms,
    migrate,
)
from tulip_memory.store.validation import MAX_QUERY_TERMS

NS = ("acme", "facts")


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")


def open_without_numpy(path: str, monkeypatch: pytest.MonkeyPatch) -> HolographicStore:
    """A store built as if numpy were not installed; it says so with a warning."""
    monkeypatch.setattr(holographic, "_numpy", lambda: None)
    with pytest.warns(RuntimeWarning, match="numpy is not installed"):
        return HolographicStore(path)


@pytest.fixture(params=["hrr+fts", "fts-only"])
async def hstore(
    request: pytest.FixtureRequest, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[HolographicStore]:
    """A file-backed store, with numpy and as if without it."""
    if request.param == "fts-only":
        store = open_without_numpy(db_path, monkeypatch)
    else:
        store = HolographicStore(db_path)
    try:
        yield store
    finally:
        await store.close()


def unit(i: int, dim: int = 1024) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


# -- durability and SQLite ---------------------------------------------------------------


async def test_everything_survives_a_reopen(db_path: str) -> None:
    store = HolographicStore(db_path)
    await store.put(NS, "pref", {"theme": "dark"}, {"source": "chat"})
    await store.put(NS, "pref", {"theme": "light"}, {"source": "settings"})
    await store.put(NS, "city", "lives in Lisbon near the river")
    await store.put_with_embedding(NS, "vec", "a vector", unit(3), {"kind": "axis"})
    before = await store.get_item(NS, "pref")
    await store.close()

    reopened = HolographicStore(db_path)
    try:
        after = await reopened.get_item(NS, "pref")
        assert after == before and after is not None and after.version == 2
        assert (await reopened.search(NS, "Lisbon"))[0].key == "city"
        assert await reopened.get_embedding(NS, "vec") == unit(3)
        hits = await reopened.search_by_embedding(NS, unit(3), metadata_filter={"kind": "axis"})
        assert [h.item.key for h in hits] == ["vec"]
        assert await reopened.list_namespaces() == [NS]
        await reopened.put(NS, "pref", {"theme": "blue"})
        third = await reopened.get_item(NS, "pref")
        assert third is not None and before is not None
        assert third.version == 3 and third.created_at == before.created_at
        assert third.updated_at > before.updated_at
    finally:
        await reopened.close()


async def test_a_file_database_runs_in_wal_mode(db_path: str) -> None:
    store = HolographicStore(db_path)
    await store.put(NS, "k", 1)
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # A reader beside the store's connection sees committed rows.
        assert other.execute("SELECT count(*) FROM items").fetchone()[0] == 1
    finally:
        other.close()
        await store.close()


async def test_in_memory_database_is_the_default() -> None:
    store = HolographicStore()
    try:
        await store.put(NS, "k", "hello world")
        assert [i.key for i in await store.search(NS, "world")] == ["k"]
    finally:
        await store.close()
    fresh = HolographicStore()
    try:
        assert await fresh.get(NS, "k") is None
    finally:
        await fresh.close()


def test_migrations_apply_once_in_order_and_a_newer_schema_is_refused(db_path: str) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        version = migrate(conn)
        assert version == len(holographic._MIGRATIONS) >= 1
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert {"items", "items_fts", "meta", "items_recent"} <= names
        assert migrate(conn) == version  # a no-op the second time
        conn.execute(f"PRAGMA user_version = {version + 1}")
        with pytest.raises(ValueError, match="newer than this code"):
            migrate(conn)
    finally:
        conn.close()
    with pytest.raises(ValueError, match="newer than this code"):
        HolographicStore(db_path)


async def test_a_file_keeps_the_dim_it_was_created_with(db_path: str) -> None:
    await HolographicStore(db_path, dim=64).close()
    with pytest.raises(ValueError, match="created with dim=64"):
        HolographicStore(db_path, dim=32)
    store = HolographicStore(db_path, dim=64)
    assert store.capabilities.embedding_dimension == 128
    await store.close()
    with pytest.raises(ValueError, match="dim must be >= 1"):
        HolographicStore(db_path, dim=0)


async def test_close_is_idempotent_and_later_calls_fail_clearly() -> None:
    store = HolographicStore()
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.get(NS, "k")


# -- transactions and concurrency --------------------------------------------------------


async def test_put_batch_is_one_transaction(hstore: HolographicStore) -> None:
    # The second row fails inside the transaction (SQLite cannot store a lone
    # surrogate), after the first was written: the first is rolled back with it.
    bad_ns = ("acme", "bad\ud800")
    with pytest.raises(UnicodeEncodeError):
        await hstore.put_batch([(NS, "good", 1, None), (bad_ns, "k", 2, None)])
    assert await hstore.list_keys(NS) == []
    # Writes in one batch count like sequential puts.
    await hstore.put_batch([(NS, "k", 1, None), (NS, "k", 2, None), (NS, "j", 3, None)])
    item = await hstore.get_item(NS, "k")
    assert item is not None and item.value == 2 and item.version == 2


def test_concurrent_writers_in_threads_lose_no_update(db_path: str) -> None:
    # Two stores on one file (as two processes would have), eight threads, each with
    # its own event loop: every write to the shared key is counted.
    stores = [HolographicStore(db_path), HolographicStore(db_path)]

    def writer(i: int) -> None:
        async def run() -> None:
            for j in range(10):
                await stores[i % 2].put(NS, "shared", f"{i}-{j}")
                await stores[i % 2].put(NS, f"k{i}-{j}", j)

        asyncio.run(run())

    async def check() -> tuple[int, int]:
        item = await stores[0].get_item(NS, "shared")
        keys = await stores[1].list_keys(NS, limit=1000)
        for s in stores:
            await s.close()
        return (0 if item is None else item.version), len(keys)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))
    assert asyncio.run(check()) == (80, 81)


async def test_a_blocked_database_does_not_block_the_event_loop(db_path: str) -> None:
    store = HolographicStore(db_path)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # holds the write lock: the store's put must wait
    try:
        put = asyncio.create_task(store.put(NS, "k", 1))
        started = time.monotonic()
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert time.monotonic() - started < 2.0  # the loop kept running
        assert not put.done()
        blocker.execute("COMMIT")
        await asyncio.wait_for(put, timeout=10)
        assert await store.get(NS, "k") == 1
    finally:
        blocker.close()
        await store.close()


# -- text in any script ------------------------------------------------------------------


def test_folding_and_terms() -> None:
    assert fold("Ο ΚΑΦΈΣ") == "ο καφεσ"
    assert fold("Köln Straße ＡＢＣ") == "koln strasse abc"
    assert lexical_terms("don't_stop 2024!") == ["don", "t", "stop", "2024"]
    assert lexical_terms("東京に住む") == ["東京", "京に", "に住", "住む"]
    assert lexical_terms("猫") == ["猫"]
    assert lexical_terms("I ❤️ 🍕!") == ["i", "❤", "🍕"]
    assert lexical_terms("Привет, МИР") == ["привет", "мир"]
    assert lexical_terms("... ?! --") == []


@pytest.mark.parametrize("text", ["Hello, World_42!", "don't STOP", "a-b+c*d", "  ", "x"])
def test_ascii_text_takes_a_fast_path_to_the_same_terms(text: str) -> None:
    # Appending a non-ASCII word sends the text down the general path.
    assert lexical_terms(text) == lexical_terms(text + " é")[:-1]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("私は東京に住んでいます", "東京"),
        ("私は東京に住んでいます", "東京に住んでいますか？"),
        ("私は東京に住んでいます", "東"),
        ("Ο καφές είναι πολύ ζεστός", "ΚΑΦΕΣ"),
        ("Ο καφές είναι πολύ ζεστός", "καφές"),
        ("Ich wohne in Köln an der Straße", "koln strasse"),
        ("Привет, мир", "МИР"),
        ("I love 🍕 on fridays", "🍕"),
        ("서울에 살아요", "서울"),
    ],
)
async def test_text_in_any_script_is_found(hstore: HolographicStore, text: str, query: str) -> None:
    await hstore.put(NS, "target", {"note": text})
    await hstore.put(NS, "decoy1", "works as a nurse at night")
    await hstore.put(NS, "decoy2", "favourite colour is green")
    assert fts_query(query) is not None
    found = await hstore.search(NS, query)
    assert found[0].key == "target" and found[0].value == {"note": text}
    assert len(found) == 3


@pytest.mark.parametrize(
    "query",
    [
        'AND OR "*',
        '"',
        '"unterminated lisbon',
        "NEAR(lisbon river, 2)",
        "terms:lisbon",
        "{terms}: lisbon",
        "^lisbon",
        "-lisbon",
        "lisbon*",
        "(((",
        "lisbon AND",
        "NOT",
        "*",
        "'; DROP TABLE items; --",
        'x" OR "',
        "nul\x00byte",
        "lone \ud800 surrogate",
        "lisbon " * 2000,
        "",
        "   ",
    ],
)
async def test_hostile_fts_syntax_is_searched_as_text(hstore: HolographicStore, query: str) -> None:
    await hstore.put(NS, "city", "lives in Lisbon near the river")
    await hstore.put(NS, "job", "works as a nurse at night")
    await hstore.put(NS, "empty", "")
    found = await hstore.search(NS, query)
    assert sorted(i.key for i in found) == ["city", "empty", "job"]
    if "lisbon" in query:
        assert found[0].key == "city"
    assert await hstore.get(NS, "city") == "lives in Lisbon near the river"


def test_fts_query_quotes_every_term() -> None:
    assert fts_query('AND OR "*') == '"and" OR "or"'
    assert fts_query('say "hi" NEAR(x)') == '"say" OR "hi" OR "near"* OR "x"'
    assert fts_query("lives lives LIVES") == '"lives"*'
    assert fts_query("東京") == '"東京"'
    assert fts_query("東") == '"東"*'
    assert fts_query("!!! ???") is None
    assert fts_query("") is None
    long = fts_query(" ".join(f"w{i}" for i in range(500)))
    assert long is not None and long.count(" OR ") == MAX_QUERY_TERMS - 1


# -- ranking -----------------------------------------------------------------------------


async def test_search_is_complete_and_ranked_rows_come_first(hstore: HolographicStore) -> None:
    await hstore.put(NS, "city", "she lives in Lisbon near the river")
    await hstore.put(NS, "colour", "favourite colour is green")
    await hstore.put(NS, "job", "works as a nurse at night")
    await hstore.put(NS, "blank", "...")  # no searchable text
    await hstore.put(("acme", "other"), "elsewhere", "Lisbon Lisbon Lisbon river")
    await hstore.put(("rival", "facts"), "rival", "Lisbon river")

    found = [i.key for i in await hstore.search(NS, "does she live in lisbon?", limit=10)]
    # Then the rest, rows with text first, most recent first; never another namespace.
    assert found == ["city", "job", "colour", "blank"]
    assert [i.key for i in await hstore.search(NS, "lisbon", limit=2)] == ["city", "job"]
    assert await hstore.search(NS, "lisbon", limit=0) == []
    assert len(await hstore.search(NS, "zzz", limit=3)) == 3
    assert [i.key for i in await hstore.search(NS)] == ["blank", "job", "colour", "city"]


async def test_search_many_answers_each_namespace_of_one_tenant(
    hstore: HolographicStore,
) -> None:
    a, b = ("acme", "user"), ("acme", "project")
    await hstore.put(a, "tea", "likes green tea in the morning")
    await hstore.put(a, "chess", "plays chess on weekends")
    await hstore.put(b, "deadline", "the project deadline is friday")
    many = await hstore.search_many([a, b, ("acme", "empty")], "chess friday", limit=5)
    assert [[i.key for i in r] for r in many] == [["chess", "tea"], ["deadline"], []]
    with pytest.raises(ValueError, match="spans tenants"):
        await hstore.search_many([a, ("rival", "user")], "chess")


async def test_rows_both_rankings_agree_on_come_first(db_path: str) -> None:
    store = HolographicStore(db_path)
    try:
        await store.put(NS, "both", "green tea garden")
        await store.put(NS, "long", "tea " + " ".join(f"filler{i}" for i in range(40)))
        await store.put(NS, "none", "works as a nurse at night")
        found = [i.key for i in await store.search(NS, "green tea garden")]
        assert found == ["both", "long", "none"]
    finally:
        await store.close()


async def test_a_query_with_no_lexical_match_still_ranks_by_vectors(db_path: str) -> None:
    store = HolographicStore(db_path)
    try:
        vec = HRREncoder(512).embed(["lisbon river"])[0]
        # The value holds no word of the query: only its vector can associate it.
        await store.put_with_embedding(NS, "vec-only", {"n": 1}, [float(x) for x in vec])
        await store.put(NS, "recent", "works as a nurse at night")
        assert [i.key for i in await store.search(NS)] == ["recent", "vec-only"]
        assert [i.key for i in await store.search(NS, "Lisbon")] == ["vec-only", "recent"]
    finally:
        await store.close()


async def test_search_by_embedding_skips_zero_queries_and_rows_without_vectors(
    db_path: str,
) -> None:
    store = HolographicStore(db_path)
    try:
        await store.put(NS, "text", "has an hrr vector")
        await store.put(NS, "blank", "")  # no text, so no vector
        await store.put_with_embedding(NS, "axis", "x", unit(0))
        assert await store.search_by_embedding(NS, [0.0] * 1024) == []
        hits = await store.search_by_embedding(NS, unit(0), limit=10)
        assert hits[0].item.key == "axis"
        assert "blank" not in [h.item.key for h in hits]
        assert await store.get_embedding(NS, "blank") is None
        text_vec = await store.get_embedding(NS, "text")
        assert text_vec is not None and len(text_vec) == 1024
    finally:
        await store.close()


async def test_list_namespaces_sorts_as_tuples(hstore: HolographicStore) -> None:
    spaces = [("acme", "a"), ("acme", "a", "b"), ("acme", "a\x01"), ("acme", "b")]
    for ns in spaces:
        await hstore.put(ns, "k", 1)
    await hstore.put(("acmeX", "a"), "k", 1)
    assert await hstore.list_namespaces(("acme",)) == sorted(spaces)
    assert await hstore.list_namespaces(("acme", "a")) == [("acme", "a"), ("acme", "a", "b")]
    assert len(await hstore.list_namespaces()) == 5
    assert await hstore.list_namespaces(limit=0) == []


# -- without numpy -----------------------------------------------------------------------


async def test_without_numpy_search_is_fts5_plus_recency(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_without_numpy(db_path, monkeypatch)
    try:
        caps = store.capabilities
        assert caps.search and caps.batch_operations and caps.list_namespaces
        assert not caps.semantic_search and caps.embedding_dimension is None
        await store.put(NS, "city", "lives in Lisbon near the river")
        await store.put(NS, "job", "works as a nurse at night")
        await store.put(NS, "blank", "")
        assert [i.key for i in await store.search(NS, "live in lisbon")] == [
            "city",
            "job",
            "blank",
        ]
        assert [i.key for i in await store.search(NS, "nurse")] == ["job", "city", "blank"]
        for call in [
            store.put_with_embedding(NS, "v", 1, unit(0)),
            store.search_by_embedding(NS, unit(0)),
            store.get_embedding(NS, "city"),
        ]:
            with pytest.raises(StoreCapabilityError) as info:
                await call
            assert info.value.capability == "semantic_search" and "numpy" in str(info.value)
    finally:
        await store.close()
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("SELECT count(*) FROM items WHERE hrr IS NOT NULL").fetchone() == (0,)
    finally:
        raw.close()
