"""A slot registry row or layout this code never wrote cannot steer a process: slot
names are checked before they reach SQL, and an embedder is built from a registry row
only for a model and API base the process is configured for (issue 13, part 3).

The tampering is done as the administrator: the application role cannot write these
tables at all (tests/store/test_roles.py); this is the next line of defence, for a
registry changed by anyone else who can."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.reindex.test_reindex_store import Table, fill
from tests.support.openai_server import FakeOpenAI
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.embeddings.allowlist import EmbedderAllowlist, EmbedderNotAllowed, shown_url
from tulip_memory.reindex import Reindexer
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.slots import SlotNameError, column
from tulip_producer.reader import AsyncReader

MODEL = "openai/text-embedding-3-small"


@pytest.mark.parametrize("name", ["embedding", "embedding_1", "embedding_907"])
def test_slot_names_this_code_creates_pass(name: str) -> None:
    assert column(name) == name


@pytest.mark.parametrize(
    "name",
    ["embedding; DROP TABLE x", "content", "Embedding", "embedding_0", "embedding_1 ",
     "embedding_01", "embedding_x", "", 7, None, "embedding_" + "9" * 19],
)  # fmt: skip
def test_any_other_slot_name_is_refused_naming_it(name: object) -> None:
    with pytest.raises(SlotNameError, match="refused vector slot") as e:
        column(name)
    assert repr(name) in str(e.value)


def test_allowlist_entries() -> None:
    allowed = EmbedderAllowlist.parse(f" {MODEL}, openai/bge=http://embed:8080/v1/ ,")
    assert allowed.allows(MODEL, None) and allowed.allows(MODEL, "")
    assert not allowed.allows(MODEL, "http://attacker.example/v1")
    assert allowed.allows("openai/bge", "http://embed:8080/v1")
    assert not allowed.allows("openai/bge", None)
    assert allowed.allows("hashing:64", None)  # computed in-process, reaches nothing
    assert not EmbedderAllowlist().allows(MODEL, None)
    assert EmbedderAllowlist().including(MODEL, "http://x/").allows(MODEL, "http://x")
    with pytest.raises(ValueError, match="has no model"):
        EmbedderAllowlist.parse("=http://x")
    with pytest.raises(ValueError, match="whitespace"):
        EmbedderAllowlist.parse("openai/a b")


def test_refusals_never_show_url_credentials() -> None:
    assert shown_url("https://user:pw@host:1/v1") == "https://host/v1"
    error = EmbedderNotAllowed("embedding_3", MODEL, "https://user:pw@evil/v1")
    assert "pw" not in str(error).split("allow it")[0] and "embedding_3" in str(error)


@pytest.fixture
async def store(postgres: Postgres) -> AsyncIterator[PgMemory]:
    table = f"slots_{uuid.uuid4().hex[:8]}"
    s = app_store(postgres.app_dsn, table=table, embedder=HashingEmbedder(64))
    await s.put(("acme", "facts"), "k", "the user likes cello")
    yield s
    await s.close()


def allowing(dsn: str, table: str, dim: int, url: str) -> PgMemory:
    """A store of the application role configured to use :data:`MODEL` at ``url``."""
    return PgMemory(
        dsn, table=table, embedder=HashingEmbedder(dim), allowed_embedders=[f"{MODEL}={url}"]
    )


async def tamper(admin_dsn: str, table: str, api_base: str, slot: str = "embedding_9") -> None:
    """What a registry changed behind the code's back looks like: a slot of another
    model at another address, which recall reads."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        for t in (table, f"{table}_turns"):
            await conn.execute(f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS embedding_9 vector(64)")
        await conn.execute(
            f"INSERT INTO {table}_slots (slot, model, dim, spec, api_base) "
            "VALUES ($1, $2, 64, $2, $3)",
            slot, MODEL, api_base,
        )  # fmt: skip
        await conn.execute(f"UPDATE {table}_layout SET read_slot = $1", slot)
    finally:
        await conn.close()


async def test_a_registry_row_naming_an_unconfigured_address_is_refused_and_never_called(
    postgres: Postgres, store: PgMemory, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the key the row would leak
    await tamper(postgres.admin_dsn, store.table_name, fake_openai.url)
    reader = PgMemory(postgres.app_dsn, table=store.table_name, embedder=HashingEmbedder(64))
    try:
        with pytest.raises(EmbedderNotAllowed, match="'embedding_9'") as e:
            await reader.search(("acme", "facts"), "what does the user play?")
        assert "TULIP_EMBED_ALLOWED" in str(e.value)
        assert fake_openai.requests_to("/v1/embeddings") == []  # nothing left the process
    finally:
        await reader.close()
    # The same row, for a process configured to use that model there, is followed.
    allowed = allowing(postgres.app_dsn, store.table_name, 64, fake_openai.url)
    try:
        await allowed.search(("acme", "facts"), "what does the user play?")
        assert len(fake_openai.requests_to("/v1/embeddings")) == 1
    finally:
        await allowed.close()


async def test_a_layout_naming_a_column_this_code_never_made_is_refused(
    postgres: Postgres, store: PgMemory
) -> None:
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        await conn.execute(f"UPDATE {store.table_name}_layout SET read_slot = 'embedding, content'")
    finally:
        await conn.close()
    reader = PgMemory(postgres.app_dsn, table=store.table_name, embedder=HashingEmbedder(64))
    try:
        with pytest.raises(SlotNameError, match="'embedding, content'"):
            await reader.search(("acme", "facts"), "cello")
        with pytest.raises(SlotNameError, match="'embedding, content'"):
            await reader.put(("acme", "facts"), "k2", "another fact")
    finally:
        await reader.close()


def reader_env(postgres: Postgres, table: str, allowed: str = "") -> dict[str, str]:
    """What a chat backend's Reader is configured with: its own embedder, and
    ``allowed`` as ``TULIP_EMBED_ALLOWED``."""
    env = {"TULIP_DATABASE_URL": postgres.app_dsn, "TULIP_MEMORY_TABLE": table}
    return {**env, "TULIP_EMBED_MODEL": "hashing:64", "TULIP_EMBED_ALLOWED": allowed}


async def test_reader_recall_sends_nothing_to_a_registry_address_it_was_not_given(
    postgres: Postgres, store: PgMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry's model is allowed, but at another address: the row's is refused."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as attacker:
        await tamper(postgres.admin_dsn, store.table_name, attacker.url)
        env = reader_env(postgres, store.table_name, f"{MODEL}=http://embed.internal:8080/v1")
        reader = AsyncReader.from_env(env)
        try:
            with pytest.raises(EmbedderNotAllowed, match="'embedding_9'") as e:
                await reader.recall(("acme", "users", "u1"), "what does the user play?")
            assert "not configured to use" in str(e.value)
        finally:
            await reader.close()
        assert attacker.requests == []


async def test_reader_recall_refuses_a_registry_row_with_a_name_this_code_never_wrote(
    postgres: Postgres, store: PgMemory
) -> None:
    hostile = "embedding_9 vector(3)); DROP TABLE x; --"
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        await conn.execute(
            f"INSERT INTO {store.table_name}_slots (slot, model, dim) VALUES ($1, 'm', 3)", hostile
        )
    finally:
        await conn.close()
    reader = AsyncReader.from_env(reader_env(postgres, store.table_name))
    try:
        with pytest.raises(SlotNameError, match="refused vector slot") as e:
            await reader.recall(("acme", "users", "u1"), "cello")
        assert repr(hostile) in str(e.value)
    finally:
        await reader.close()


async def test_a_reindex_batch_sends_nothing_to_a_slot_address_changed_mid_job(
    postgres: Postgres, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job to a model at its own address; the registry row (and the job) then name
    another. The batch, run by a worker configured for the job's model where it was
    started (the code a reindex worker's task runs), pauses the job naming the slot,
    and nothing reaches the other address."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    table = Table(f"rs_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)
    owner_side = table.store()
    await fill(owner_side, ["acme"], 6)
    owner_side.allow_embedder(MODEL, fake_openai.url)
    sent: list[tuple[int, int, str]] = []
    reindexer = Reindexer(owner_side, send=lambda *b: sent.append(b), admin_dsn=table.admin_dsn)
    job = await reindexer.start(MODEL, tenant="acme", api_base=fake_openai.url, batch=4)
    probed = len(fake_openai.requests_to("/v1/embeddings"))
    worker_store = allowing(postgres.app_dsn, table.name, 32, fake_openai.url)
    try:
        with FakeOpenAI() as attacker:
            await table.admin(f"UPDATE {table.name}_slots SET api_base = $1", attacker.url)
            await table.admin(f"UPDATE {table.name}_reindex_jobs SET api_base = $1", attacker.url)
            worker = Reindexer(worker_store)
            assert await worker.run_batch(*sent[0]) == "paused"
            assert attacker.requests == []
        paused = await reindexer.progress(job.id)
        assert paused.job.status == "paused" and paused.ranges_done == 0
        assert f"vector slot {job.slot!r}" in (paused.job.error or "")
        assert "not configured to use" in (paused.job.error or "")
        assert len(fake_openai.requests_to("/v1/embeddings")) == probed  # none from the batch
    finally:
        await worker_store.close()
        await owner_side.close()


async def test_a_reindex_job_naming_a_column_this_code_never_made_is_refused(
    postgres: Postgres,
) -> None:
    table = Table(f"rs_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)
    store = table.store()
    await fill(store, ["acme"], 6)
    sent: list[tuple[int, int, str]] = []
    reindexer = Reindexer(store, send=lambda *b: sent.append(b), admin_dsn=table.admin_dsn)
    job = await reindexer.start("hashing:48", tenant="acme", batch=4)
    hostile = "embedding, content"
    await table.admin(f"UPDATE {table.name}_reindex_jobs SET slot = $1", hostile)
    try:
        with pytest.raises(SlotNameError, match=repr(hostile)):
            await Reindexer(store).run_batch(*sent[0])
        with pytest.raises(SlotNameError, match=repr(hostile)):
            await reindexer.progress(job.id)
    finally:
        await store.close()
