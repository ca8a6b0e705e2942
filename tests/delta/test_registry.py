"""get_checkpointer / register_checkpointer / list_checkpointers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.delta.conftest import grow, make_bucket
from tulip_memory import registry
from tulip_memory.delta import (
    DeltaCheckpointer,
    FileDeltaStorage,
    InMemoryDeltaStorage,
    S3DeltaStorage,
)
from tulip_memory.registry import (
    BaseCheckpointer,
    UnknownCheckpointerError,
    get_checkpointer,
    list_checkpointers,
    register_checkpointer,
)


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    saved = dict(registry._CHECKPOINTERS)
    yield
    registry._CHECKPOINTERS.clear()
    registry._CHECKPOINTERS.update(saved)


def test_builtin_providers() -> None:
    assert {"memory", "file", "s3"} <= set(list_checkpointers())
    memory = get_checkpointer("memory", max_chain_depth=3)
    assert isinstance(memory, DeltaCheckpointer) and isinstance(memory, BaseCheckpointer)
    assert isinstance(memory.storage, InMemoryDeltaStorage) and memory.max_chain_depth == 3
    assert isinstance(get_checkpointer("memory://"), DeltaCheckpointer)


@pytest.mark.parametrize("spelling", ["file:{d}", "file://{d}"])
async def test_file_provider(tmp_path: Path, spelling: str) -> None:
    cp = get_checkpointer(spelling.format(d=tmp_path / "cp"), fsync=False)
    assert isinstance(cp, DeltaCheckpointer) and isinstance(cp.storage, FileDeltaStorage)
    assert cp.storage.base_dir == (tmp_path / "cp").absolute()
    state = grow(2)[-1]
    await cp.save(state, "t")
    assert await get_checkpointer(f"file:{tmp_path / 'cp'}").load("t") == state


@pytest.mark.parametrize("spelling", ["s3:{b}/threads/v1", "s3://{b}/threads/v1"])
async def test_s3_provider(s3_endpoint: str, s3_client: Any, spelling: str) -> None:
    bucket = make_bucket(s3_client)
    cp = get_checkpointer(spelling.format(b=bucket), endpoint_url=s3_endpoint)
    assert isinstance(cp, DeltaCheckpointer) and isinstance(cp.storage, S3DeltaStorage)
    assert (cp.storage.bucket, cp.storage.prefix) == (bucket, "threads/v1/")
    state = grow(3)[-1]
    await cp.save(state, "t")
    assert await cp.load("t") == state
    await cp.close()


def test_s3_provider_reads_the_endpoint_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TULIP_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    cp = get_checkpointer("s3:bucket")
    assert isinstance(cp, DeltaCheckpointer) and isinstance(cp.storage, S3DeltaStorage)
    assert cp.storage.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert cp.storage.prefix == ""


@pytest.mark.parametrize("bad", ["file", "file:", "s3", "memory:name"])
def test_providers_refuse_missing_or_unexpected_configuration(bad: str) -> None:
    with pytest.raises(ValueError):
        get_checkpointer(bad)


def test_unknown_options_fail_early() -> None:
    with pytest.raises(TypeError):
        get_checkpointer("memory", max_chain_dept=3)


def test_unknown_provider_names_the_available_ones() -> None:
    with pytest.raises(ValueError, match="Unknown checkpointer provider: 'redis'") as e:
        get_checkpointer("redis:localhost:6379")
    assert isinstance(e.value, UnknownCheckpointerError)
    assert e.value.provider == "redis" and "memory" in e.value.available
    assert "register a custom provider" in str(e.value)


async def test_a_wrapping_provider_can_be_registered_later() -> None:
    """The hook the producer uses for ``"queued:<inner>"``."""
    seen: dict[str, Any] = {}

    def queued(*, config_hint: str, **kwargs: Any) -> BaseCheckpointer:
        seen["hint"] = config_hint
        return get_checkpointer(config_hint, **kwargs)

    register_checkpointer("queued", queued)
    assert "queued" in list_checkpointers()
    cp = get_checkpointer("queued:memory", max_chain_depth=2)
    assert seen["hint"] == "memory" and isinstance(cp, DeltaCheckpointer)
    state = grow(2)[-1]
    await cp.save(state, "t")
    assert await cp.load("t") == state
    with pytest.raises(ValueError):
        register_checkpointer("bad:name", queued)
