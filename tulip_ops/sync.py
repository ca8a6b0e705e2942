"""Running a coroutine from the synchronous code of the commands."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
