"""What an HNSW build may take from the server: memory and parallel workers.

Shared by a reindex's index phase (:mod:`~tulip_memory.reindex.reindexer`) and the
namespaces' own graphs (:mod:`~tulip_memory.reindex.graphs`).
"""

from __future__ import annotations

#: Bounds of an HNSW build's maintenance_work_mem (MB) and parallel workers.
BUILD_MEMORY_MB = (64, 4096)
BUILD_WORKERS = 4


def build_resources(
    rows: float, dim: int, server_workers: int, maintenance_workers: int
) -> tuple[int, int]:
    """maintenance_work_mem (MB) and parallel workers for an HNSW build over ``rows``
    vectors of ``dim``: the graph holds each vector (halfvec: 2 bytes a dimension) and its
    neighbour lists (m = 16: 32 links at layer 0, ~8 bytes each) with headroom. The
    workers are the server's ``max_parallel_maintenance_workers`` (the operator's
    say in how many cores maintenance may take from queries, 2 by default), within
    what ``max_worker_processes`` leaves and :data:`BUILD_WORKERS`."""
    need = rows * (2 * dim + 32 * 8 + 64) * 1.5 / 2**20
    memory = int(min(BUILD_MEMORY_MB[1], max(BUILD_MEMORY_MB[0], need)))
    return memory, max(0, min(BUILD_WORKERS, maintenance_workers, server_workers - 2))
