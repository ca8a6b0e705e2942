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

from tests.support.openai_server import FakeOpenAI
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.embeddings.allowlist import EmbedderAllowlist, EmbedderNotAllowed, shown_url
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.slots import SlotNameError, column

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
    allowed = PgMemory(
        postgres.app_dsn,
        table=store.table_name,
        embedder=HashingEmbedder(64),
        allowed_embedders=[f"{MODEL}={fake_openai.url}"],
    )
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
