"""Every class and function the seed documents, at its seed path (``tulip.memory.X`` ->
``tulip_memory.X``), with the seed's parameters and defaults.

The table is written from the seed documents. A parameter the seed documents must exist
with the same kind and default; parameters this project adds must be keyword-only with
a default, so every call written against the seed still binds the same way.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

REQUIRED = inspect.Parameter.empty
K = "keyword-only"
#: A default the seed names only symbolically (``_DEFAULT_DIM``, a factory): any value.
ANY = object()

#: (module, name, {parameter: default}); K marks keyword-only parameters: (K, default).
SEED: list[tuple[str, str, dict[str, Any]]] = [
    ("tulip_memory.conversation", "NullManager", {}),
    (
        "tulip_memory.conversation",
        "SlidingWindowManager",
        {"window_size": 20, "preserve_system": True, "preserve_first_user": True, "slide_step": 1},
    ),
    (
        "tulip_memory.conversation",
        "SummarizingManager",
        {"threshold": 30, "keep_recent": 10, "summarize_fn": None, "preserve_system": True},
    ),
    (
        "tulip_memory.compactor",
        "LLMCompactor",
        {
            "context_length": (K, 128_000),
            "trigger_fraction": (K, 0.8),
            "head_turns": (K, 2),
            "tail_token_fraction": (K, 0.5),
            "summarize_fn": (K, None),
        },
    ),
    ("tulip_memory.store", "InMemoryStore", {}),
    ("tulip_memory.store", "HolographicStore", {"path": ":memory:", "dim": (K, ANY)}),
    (
        "tulip_memory.store",
        "PgMemory",
        {
            "dsn": REQUIRED,
            "table": (K, "tulip_memories"),
            "dim": (K, 512),
            "embedder": (K, None),
            "encoding_cache": (K, ANY),
        },
    ),
    ("tulip_memory.store", "NamespacedStore", {"store": REQUIRED, "namespace": REQUIRED}),
    (
        "tulip_memory.store",
        "StoreContext",
        {"store": REQUIRED, "user_id": None, "session_id": None},
    ),
    (
        "tulip_memory.store",
        "StoreItem",
        {
            "namespace": REQUIRED,
            "key": REQUIRED,
            "value": REQUIRED,
            "metadata": REQUIRED,
            "created_at": REQUIRED,
            "updated_at": REQUIRED,
            "version": 1,
        },
    ),
    (
        "tulip_memory.store",
        "StoreCapabilities",
        {
            "search": False,
            "semantic_search": False,
            "embedding_dimension": None,
            "ttl": False,
            "list_namespaces": False,
            "batch_operations": False,
            "transactions": False,
        },
    ),
    (
        "tulip_memory.store",
        "SemanticSearchResult",
        {"item": REQUIRED, "score": REQUIRED, "distance": None},
    ),
    (
        "tulip_memory.store",
        "StoreCapabilityError",
        {"capability": REQUIRED, "store_class": REQUIRED, "hint": None},
    ),
    (
        "tulip_memory.manager",
        "LLMMemoryManager",
        {
            "store": REQUIRED,
            "extract_fn": (K, None),
            "namespace_prefix": (K, ("tulip_memory",)),
            "max_memories": (K, 50),
            "retrieve_limit": (K, 20),
            "extract_mode": (K, "inline"),
            "max_concurrent_extractions": (K, 4),
            "namespace_resolver": (K, None),
        },
    ),
    ("tulip_memory.store_backends.holographic", "HolographicStore", {"path": ":memory:"}),
    ("tulip_memory.store_backends.postgresql", "PgMemory", {"dsn": REQUIRED}),
    ("tulip_memory.manager", "NoopMemoryManager", {}),
    (
        "tulip_memory.manager",
        "Mem0MemoryManager",
        {
            "client": (K, None),
            "config": (K, None),
            "user_id": (K, None),
            "agent_id": (K, None),
            "run_id": (K, None),
            "search_query": (K, None),
            "retrieve_limit": (K, 20),
        },
    ),
    ("tulip_memory.managers.mem0", "Mem0MemoryManager", {"retrieve_limit": (K, 20)}),
    (
        "tulip_memory.manager",
        "Memory",
        {"type": REQUIRED, "key": REQUIRED, "content": REQUIRED, "metadata": ANY},
    ),
    (
        "tulip_memory.delta",
        "DeltaCheckpointer",
        {"storage": None, "max_chain_depth": 5, "compression_level": 6},
    ),
    (
        "tulip_memory.delta",
        "DeltaCheckpoint",
        {"metadata": REQUIRED, "data": REQUIRED, "is_delta": True},
    ),
    (
        "tulip_memory.delta",
        "CheckpointMetadata",
        {
            "checkpoint_id": REQUIRED,
            "thread_id": REQUIRED,
            "parent_id": None,
            "is_full": True,
            "chain_depth": 0,
            "created_at": ANY,
            "size_bytes": 0,
            "compressed_size_bytes": 0,
        },
    ),
    ("tulip_memory.delta", "InMemoryDeltaStorage", {}),
    ("tulip_memory.registry", "get_checkpointer", {"checkpointer_string": REQUIRED}),
    ("tulip_memory.registry", "register_checkpointer", {"name": REQUIRED, "factory": REQUIRED}),
    ("tulip_memory.registry", "list_checkpointers", {}),
    ("tulip_memory.backends", "S3Backend", {"bucket": REQUIRED, "prefix": ""}),
    # 003: the turn store (``core.memory``).
    ("tulip_memory.turns", "Memory", {"embeddings": REQUIRED, "store": None}),
    ("tulip_memory.turns", "TurnVectorStore", {}),
    (
        "tulip_memory.turns",
        "TurnHit",
        {
            "score": REQUIRED,
            "turn": REQUIRED,
            "turn_index": REQUIRED,
            "text": REQUIRED,
            "metadata": REQUIRED,
        },
    ),
    (
        "tulip_memory.turns",
        "Entry",
        {"text": REQUIRED, "embedding": REQUIRED, "turn": REQUIRED, "metadata": REQUIRED},
    ),
    ("tulip_memory.turns", "cosine_similarity", {"a": REQUIRED, "b": REQUIRED}),
    ("tulip_memory.turns", "persist_store", {"store": REQUIRED, "path": REQUIRED}),
    ("tulip_memory.turns", "load_store", {"path": REQUIRED}),
    ("tulip_memory.observability.emit", "emit", {"name": REQUIRED}),
    ("tulip_memory.observability.emit", "emit_sync", {"name": REQUIRED}),
]


def _matches(param: inspect.Parameter, documented: Any) -> str | None:
    keyword_only = isinstance(documented, tuple) and len(documented) == 2 and documented[0] == K
    default = documented[1] if keyword_only else documented
    if keyword_only and param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
        return f"{param.name} must be accepted by keyword"
    if not keyword_only and param.kind is not param.POSITIONAL_OR_KEYWORD:
        return f"{param.name} must be positional-or-keyword, is {param.kind.description}"
    if default is REQUIRED:
        return None if param.default is REQUIRED else f"{param.name} must be required"
    if param.default is REQUIRED:
        return f"{param.name} must have a default"
    if default is ANY:
        return None
    return None if param.default == default else f"{param.name}={param.default!r}, seed {default!r}"


@pytest.mark.parametrize(
    ("module", "name", "documented"), SEED, ids=[f"{m}.{n}" for m, n, _ in SEED]
)
def test_seed_signature(module: str, name: str, documented: dict[str, Any]) -> None:
    target = getattr(importlib.import_module(module), name)
    params = inspect.signature(target).parameters
    problems = [f"{p} is missing" for p in documented if p not in params]
    problems += [
        problem
        for p, want in documented.items()
        if p in params and (problem := _matches(params[p], want))
    ]
    seed_order = [p for p in params if p in documented]
    if seed_order != list(documented):
        problems.append(f"order {seed_order} differs from the seed's {list(documented)}")
    for p, param in params.items():
        if p in documented or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        if param.kind is not param.KEYWORD_ONLY or param.default is REQUIRED:
            problems.append(f"{p} (not in the seed) must be keyword-only with a default")
    assert problems == []


@pytest.mark.parametrize(
    ("module", "name", "abstract"),
    [
        ("tulip_memory.conversation", "ConversationManager", {"apply"}),
        ("tulip_memory.store", "BaseStore", {"put", "get", "delete", "list_keys"}),
        ("tulip_memory.manager", "BaseMemoryManager", {"extract", "retrieve", "save"}),
    ],
)
def test_seed_abstract_methods(module: str, name: str, abstract: set[str]) -> None:
    assert getattr(importlib.import_module(module), name).__abstractmethods__ == abstract


def test_memory_types_are_the_seeds() -> None:
    from tulip_memory.manager import MemoryType

    assert {"user", "feedback", "project", "reference"} <= {t.value for t in MemoryType}


def test_the_seed_module_paths_re_export_one_implementation() -> None:
    from tulip_memory.manager import Mem0MemoryManager
    from tulip_memory.managers.mem0 import Mem0MemoryManager as SeedPathMem0
    from tulip_memory.store import HolographicStore, PgMemory
    from tulip_memory.store_backends.holographic import HolographicStore as SeedPathHolographic
    from tulip_memory.store_backends.postgresql import PGVECTOR_ANN_MAX_DIM
    from tulip_memory.store_backends.postgresql import PgMemory as SeedPathPg

    assert SeedPathMem0 is Mem0MemoryManager and SeedPathPg is PgMemory
    assert SeedPathHolographic is HolographicStore and PGVECTOR_ANN_MAX_DIM == 2000
