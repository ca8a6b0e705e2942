"""Thread state per tenant over one storage: isolation, key scheme, the migration."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.delta.conftest import grow
from tulip_memory.delta import (
    DeltaCheckpointer,
    DeltaStorage,
    FileDeltaStorage,
    InMemoryDeltaStorage,
)
from tulip_memory.delta.keys import is_segment, scoped_key, tenant_part, unscoped_key
from tulip_memory.delta.tenants import TenantStorage, adopt_thread, tenant_checkpointer
from tulip_memory.summaries import SummaryStore
from tulip_memory.summarize import Summary
from tulip_ops.cli import main


async def test_the_same_thread_id_in_two_tenants_is_two_threads(storage: DeltaStorage) -> None:
    base = DeltaCheckpointer(storage)
    a, b = tenant_checkpointer(base, "a"), tenant_checkpointer(base, "b")
    states = grow(3)
    ids = [await a.save(s, "thread-7") for s in states]
    assert await a.load("thread-7") == states[-1]
    assert await b.load("thread-7") is None
    assert await b.list_checkpoints("thread-7") == []
    assert await b.list_threads() == [] and await base.list_threads() == []
    assert not await b.delete("thread-7")
    assert not await b.copy_thread("thread-7", "stolen")
    await b.save(grow(1)[0], "thread-7")
    assert await a.load("thread-7") == states[-1]  # b's save is b's thread
    assert await a.load("thread-7", ids[0]) == states[0]
    assert await a.list_threads() == ["thread-7"] == await b.list_threads()
    assert await a.delete("thread-7")
    assert await b.load("thread-7") == grow(1)[0]


@pytest.mark.parametrize(
    "tenant", ["acme", "ACME", "a/b", "..", ".", "a.2F", "tenant with spaces", "ü" * 200]
)
def test_tenant_keys_are_injective_and_stay_inside_the_layout(tenant: str) -> None:
    part = tenant_part(tenant)
    assert part.startswith("t.") and "/" not in part and is_segment(part[2:])
    key = "log/ab/thread/0/x"
    scoped = scoped_key(part, key)
    assert scoped.split("/")[:2] == ["log", part] and unscoped_key(part, scoped) == key
    others = ["acme", "ACME", "a/b", "..", ".", "a.2F", "tenant with spaces", "ü" * 200]
    assert sum(tenant_part(o) == part for o in others) == 1


@pytest.mark.parametrize("bad", ["", "a\x1fb", "a\x00b"])
def test_a_tenant_that_is_not_a_namespace_part_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        tenant_part(bad)


def test_record_storages_are_refused_with_what_to_use() -> None:
    with pytest.raises(TypeError, match="object contract"):
        TenantStorage(InMemoryDeltaStorage(), "acme")


async def test_threads_saved_before_tenancy_are_adopted_whole(storage: DeltaStorage) -> None:
    """The migration: a root thread (history, name, summary) moves into one tenant."""
    base = DeltaCheckpointer(storage, max_chain_depth=2)
    long_id = "x" * 300  # a hashed segment: its name object moves too
    states = grow(6)
    ids = [await base.save(s, long_id) for s in states]
    summary = Summary(text="so far", start=0, end=2, fingerprint="f")
    await SummaryStore(storage).put(long_id, summary)
    await base.save(grow(2)[-1], "stays")

    assert await adopt_thread(storage, "acme", long_id)
    assert not await adopt_thread(storage, "acme", "never-saved")
    acme = tenant_checkpointer(base, "acme")
    assert await acme.load(long_id) == states[-1]
    assert [await acme.load(long_id, c) for c in ids] == states
    assert await acme.list_threads() == [long_id]
    assert await SummaryStore(acme.storage).get(long_id) == summary
    assert await base.load(long_id) is None and await base.list_threads() == ["stays"]
    assert await SummaryStore(storage).get(long_id) is None
    assert await tenant_checkpointer(base, "globex").load(long_id) is None


def test_the_adopt_command_moves_named_threads_or_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TULIP_CHECKPOINT_URL", f"file://{tmp_path / 'ckpt'}")
    base = DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt", fsync=False))
    state = grow(2)[-1]
    for thread in ("ticket-1", "ticket-2", "ticket-3"):
        asyncio.run(base.save(state, thread))
    assert main(["threads", "adopt", "--tenant", "acme", "ticket-1", "nope"]) == 1
    assert "1 thread(s) moved" in capsys.readouterr().out
    assert main(["threads", "adopt", "--tenant", "globex", "--all"]) == 0
    assert "2 thread(s) moved" in capsys.readouterr().out
    acme, globex = tenant_checkpointer(base, "acme"), tenant_checkpointer(base, "globex")
    assert asyncio.run(acme.list_threads()) == ["ticket-1"]
    assert sorted(asyncio.run(globex.list_threads())) == ["ticket-2", "ticket-3"]
    assert asyncio.run(globex.load("ticket-2")) == state
    assert asyncio.run(base.list_threads()) == []
    assert main(["threads", "adopt", "--tenant", "a\x1fb", "--all"]) == 2
