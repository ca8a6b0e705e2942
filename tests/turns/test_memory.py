"""``Memory``: indexing, search, reindex, count and clear, sync and async, per the seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.turns.fakes import FailingBackend, FixedAnswerBackend, TableBackend, make_turn
from tulip_memory.embeddings import BaseEmbedding, HashingEmbedder
from tulip_memory.errors import EmbeddingError
from tulip_memory.turns import (
    DimensionMismatchError,
    Entry,
    InvalidTurnError,
    Memory,
    TurnHit,
    TurnVectorStore,
)

TABLE = {
    "hello world": [1.0, 0.0, 0.0],
    "goodbye": [0.0, 1.0, 0.0],
    "what is up?\nnot much": [0.0, 0.0, 1.0],
    "not much": [0.0, 0.7, 0.7],
    "hi": [0.9, 0.1, 0.0],
    "farewell": [0.0, 0.9, 0.1],
}
NEW_TABLE = {text: [float(len(text)), 1.0] for text in TABLE}


@pytest.fixture
def backend() -> TableBackend:
    return TableBackend(TABLE)


@pytest.fixture
def memory(backend: TableBackend) -> Memory:
    return Memory(backend)


# construction


def test_store_defaults_to_a_fresh_one(backend: TableBackend) -> None:
    first, second = Memory(backend), Memory(backend)
    assert isinstance(first.store, TurnVectorStore)
    assert first.store is not second.store
    assert first.count() == 0


def test_a_given_store_is_used_and_the_store_is_settable(backend: TableBackend) -> None:
    store = TurnVectorStore()
    store.add("hello world", [1.0, 0.0, 0.0], make_turn("hello world"))
    memory = Memory(backend, store=store)
    assert memory.store is store and memory.count() == 1
    replacement = TurnVectorStore()
    memory.store = replacement
    memory.index_turn(make_turn("goodbye"))
    assert replacement.count() == 1 and store.count() == 1


def test_the_embeddings_backend_is_exposed(backend: TableBackend) -> None:
    assert Memory(backend).embeddings is backend


# index_turn / index_turn_text


def test_index_turn_embeds_the_first_content_text(memory: Memory, backend: TableBackend) -> None:
    turn = make_turn("hello world")
    turn["content"].append({"type": "text", "text": "goodbye"})
    assert memory.index_turn(turn, {"user_id": "u"}) == 0
    assert backend.sync_calls == [["hello world"]]
    assert list(memory.store.iter_entries()) == [
        Entry("hello world", TABLE["hello world"], turn, {"user_id": "u"})
    ]


def test_index_turn_returns_the_index_of_each_entry(memory: Memory) -> None:
    assert [memory.index_turn(make_turn(t)) for t in ("hi", "goodbye", "hi")] == [0, 1, 2]
    assert memory.count() == 3


def test_index_turn_text_embeds_the_text_and_stores_the_turn(
    memory: Memory, backend: TableBackend
) -> None:
    turn = make_turn("not much")
    index = memory.index_turn_text("what is up?\nnot much", turn, {"session_id": "s"})
    assert backend.sync_calls == [["what is up?\nnot much"]]
    (hit,) = memory.search("what is up?\nnot much", top_k=1)
    assert hit.turn_index == index
    assert hit.text == "what is up?\nnot much"
    assert hit.turn == turn and hit.turn["content"][0]["text"] == "not much"
    assert hit.metadata == {"session_id": "s"}


def test_metadata_defaults_to_an_empty_dict(memory: Memory) -> None:
    memory.index_turn(make_turn("hi"))
    memory.index_turn_text("goodbye", make_turn("goodbye"))
    assert [e.metadata for e in memory.store.iter_entries()] == [{}, {}]


@pytest.mark.parametrize(
    "turn",
    [
        {"role": "user"},
        {"role": "user", "content": []},
        {"role": "user", "content": "hello world"},
        {"role": "user", "content": [{"type": "image", "url": "x"}]},
        {"role": "user", "content": [{"type": "text", "text": None}]},
        {"role": "user", "content": ["hello world"]},
    ],
)
async def test_a_turn_without_content_text_is_refused_before_embedding(
    memory: Memory, backend: TableBackend, turn: dict[str, Any]
) -> None:
    with pytest.raises(InvalidTurnError, match=r"content"):
        memory.index_turn(turn)
    with pytest.raises(InvalidTurnError):
        await memory.aindex_turn(turn)
    assert backend.calls == 0 and memory.count() == 0


# search


def test_search_embeds_the_query_and_ranks_hits(memory: Memory, backend: TableBackend) -> None:
    for text in ("hello world", "goodbye", "not much"):
        memory.index_turn(make_turn(text))
    hits = memory.search("hi", top_k=2)
    assert backend.sync_calls[-1] == ["hi"]
    assert all(isinstance(h, TurnHit) for h in hits)
    assert [h.text for h in hits] == ["hello world", "goodbye"]
    assert hits[0].score > hits[1].score


def test_search_top_k_defaults_to_five(backend: TableBackend) -> None:
    memory = Memory(backend)
    for _ in range(6):
        memory.index_turn(make_turn("hi"))
    assert len(memory.search("hello world")) == 5


def test_search_applies_the_threshold(memory: Memory) -> None:
    for text in ("hello world", "goodbye", "not much"):
        memory.index_turn(make_turn(text))
    assert [h.text for h in memory.search("farewell", threshold=0.6)] == ["goodbye", "not much"]
    assert memory.search("farewell", threshold=0.999) == []


def test_searching_an_empty_memory_does_not_call_the_backend(
    memory: Memory, backend: TableBackend
) -> None:
    assert memory.search("hi") == []
    memory.index_turn(make_turn("hi"))
    assert memory.search("hi", top_k=0) == []
    assert backend.sync_calls == [["hi"]]


# async entry points


async def test_async_entry_points_use_aembed_only(memory: Memory, backend: TableBackend) -> None:
    assert await memory.aindex_turn(make_turn("hello world"), {"k": 1}) == 0
    turn = make_turn("not much")
    assert await memory.aindex_turn_text("what is up?\nnot much", turn) == 1
    hits = await memory.asearch("hi", top_k=1, threshold=0.5)
    assert backend.sync_calls == []
    assert backend.async_calls == [["hello world"], ["what is up?\nnot much"], ["hi"]]
    assert [(h.text, h.metadata) for h in hits] == [("hello world", {"k": 1})]


async def test_sync_and_async_entry_points_store_the_same(backend: TableBackend) -> None:
    sync, asynchronous = Memory(backend), Memory(backend)
    sync.index_turn(make_turn("hi"), {"a": 1})
    sync.index_turn_text("what is up?\nnot much", make_turn("not much"))
    await asynchronous.aindex_turn(make_turn("hi"), {"a": 1})
    await asynchronous.aindex_turn_text("what is up?\nnot much", make_turn("not much"))
    assert list(sync.store.iter_entries()) == list(asynchronous.store.iter_entries())
    assert sync.search("goodbye", top_k=3) == await asynchronous.asearch("goodbye", top_k=3)


async def test_asearch_on_an_empty_memory_does_not_call_the_backend(
    memory: Memory, backend: TableBackend
) -> None:
    assert await memory.asearch("hi") == []
    assert backend.calls == 0


# a BaseEmbedding is a backend too


async def test_a_base_embedding_works_sync_and_async() -> None:
    embedder: BaseEmbedding = HashingEmbedder(dimension=384)
    memory = Memory(embedder)
    memory.index_turn(make_turn("the cat sat on the mat"))
    await memory.aindex_turn(make_turn("stock prices fell sharply today"))
    memory.index_turn_text("favourite colour\nblue", make_turn("blue"))
    assert memory.store.dimension == 384
    assert memory.search("where did the cat sit", top_k=1)[0].text == "the cat sat on the mat"
    hits = await memory.asearch("stock prices", top_k=1)
    assert hits[0].text == "stock prices fell sharply today"


# what a backend returns


@pytest.mark.parametrize(
    "answer",
    [
        [[1.0, 0.0], [0.0, 1.0]],  # two vectors for one text
        [],  # none
        [1.0, 0.0],  # a bare vector, not a batch
        [[]],  # a zero-width vector
        [[1.0, float("nan")]],
        [[1.0], [2.0, 3.0]],  # ragged
        "not vectors",
    ],
)
async def test_an_unusable_answer_is_an_embedding_error(answer: Any) -> None:
    memory = Memory(FixedAnswerBackend(answer))
    with pytest.raises(EmbeddingError):
        memory.index_turn(make_turn("x"))
    with pytest.raises(EmbeddingError):
        await memory.aindex_turn_text("x", make_turn("x"))
    assert memory.count() == 0


def test_numpy_answers_are_accepted() -> None:
    memory = Memory(FixedAnswerBackend(np.array([[0.5, 0.5]], dtype=np.float32)))
    memory.index_turn(make_turn("x"))
    assert memory.search("x")[0].score == pytest.approx(1.0)


def test_a_backend_of_another_width_is_refused(memory: Memory) -> None:
    memory.index_turn(make_turn("hi"))
    memory.store.clear()
    memory.store.add("two wide", [1.0, 0.0], make_turn("two wide"))
    with pytest.raises(DimensionMismatchError):
        memory.index_turn(make_turn("hi"))
    with pytest.raises(DimensionMismatchError):
        memory.search("hi")
    assert memory.count() == 1


# reindex


def indexed(memory: Memory) -> Memory:
    memory.index_turn(make_turn("hello world", role="user", timestamp=1.5), {"user_id": "u1"})
    memory.index_turn_text(
        "what is up?\nnot much",
        make_turn("not much", timestamp=2.5),
        {"user_id": "u1", "nested": {"tags": ["a", "b"], "score": 0.25, "none": None}},
    )
    memory.index_turn(make_turn("goodbye"))
    return memory


def test_reindex_keeps_texts_turns_metadata_and_order_verbatim(memory: Memory) -> None:
    before = list(indexed(memory).store.iter_entries())
    memory.reindex(TableBackend(NEW_TABLE))
    after = list(memory.store.iter_entries())
    assert [(e.text, e.turn, e.metadata) for e in after] == [
        (e.text, e.turn, e.metadata) for e in before
    ]


def test_reindex_stores_the_new_models_vectors_in_one_batch(memory: Memory) -> None:
    indexed(memory)
    new = TableBackend(NEW_TABLE)
    memory.reindex(new)
    assert new.sync_calls == [["hello world", "what is up?\nnot much", "goodbye"]]
    assert [e.embedding for e in memory.store.iter_entries()] == [
        NEW_TABLE[t] for t in new.sync_calls[0]
    ]
    assert memory.store.dimension == 2


def test_after_reindex_queries_use_the_new_model(memory: Memory, backend: TableBackend) -> None:
    indexed(memory)
    calls_before = backend.calls
    new = TableBackend(NEW_TABLE)
    memory.reindex(new)
    hits = memory.search("goodbye", top_k=3)
    assert new.sync_calls[-1] == ["goodbye"]
    assert backend.calls == calls_before
    assert memory.embeddings is new
    # New vectors: goodbye [7, 1], hello world [11, 1], the Q+A pair [20, 1].
    assert [h.turn_index for h in hits] == [2, 0, 1]
    assert all(h.score > 0.99 for h in hits)  # the old model scored them 1, 0, 0


def test_reindex_keeps_turn_indices(memory: Memory) -> None:
    indexed(memory)
    memory.reindex(TableBackend(NEW_TABLE))
    by_index = {h.turn_index: h.text for h in memory.search("hi", top_k=10)}
    assert by_index == {0: "hello world", 1: "what is up?\nnot much", 2: "goodbye"}


def test_reindexing_an_empty_memory_only_swaps_the_backend(memory: Memory) -> None:
    new = TableBackend(NEW_TABLE)
    memory.reindex(new)
    assert new.calls == 0 and memory.embeddings is new and memory.count() == 0


def test_a_failed_reindex_leaves_store_and_backend_unchanged(
    memory: Memory, backend: TableBackend
) -> None:
    before = list(indexed(memory).store.iter_entries())
    with pytest.raises(ConnectionError):
        memory.reindex(FailingBackend())
    with pytest.raises(EmbeddingError):
        memory.reindex(FixedAnswerBackend([[1.0, 0.0]]))  # one vector for three texts
    with pytest.raises(EmbeddingError):
        memory.reindex(FixedAnswerBackend([[1.0, 0.0], [0.0, 1.0], [float("nan"), 1.0]]))
    assert list(memory.store.iter_entries()) == before
    assert memory.embeddings is backend


def test_reindex_with_a_base_embedding(memory: Memory) -> None:
    indexed(memory)
    memory.reindex(HashingEmbedder(dimension=64))
    assert memory.store.dimension == 64
    assert memory.search("goodbye", top_k=1)[0].text == "goodbye"


# count / clear


def test_count_and_clear(memory: Memory) -> None:
    indexed(memory)
    assert memory.count() == 3 == memory.store.count()
    memory.clear()
    assert memory.count() == 0
    assert memory.search("hi") == []
    assert memory.index_turn(make_turn("hi")) == 0
