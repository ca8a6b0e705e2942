"""``beside``: two awaits at once, the first one's error as it came, nothing left running."""

from __future__ import annotations

import asyncio

import pytest

from tulip_workers.overlap import beside


class Unreachable(ConnectionError):
    pass


async def test_both_results_and_both_ran_at_once() -> None:
    seen: list[str] = []

    async def one(name: str, value: int) -> int:
        seen.append(f"{name} starts")
        await asyncio.sleep(0.01)
        seen.append(f"{name} ends")
        return value

    assert await beside(one("a", 1), one("b", 2)) == (1, 2)
    assert seen[:2] == ["a starts", "b starts"]  # b began before a was done


async def test_the_first_ones_error_is_raised_as_it_came_and_the_second_is_cancelled() -> None:
    second_cancelled = asyncio.Event()

    async def failing() -> None:
        await asyncio.sleep(0.01)
        raise Unreachable("db down")

    async def slow() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            second_cancelled.set()
            raise
        return 1

    with pytest.raises(Unreachable, match="db down"):  # not an ExceptionGroup
        await beside(failing(), slow())
    assert second_cancelled.is_set()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_the_second_ones_error_is_raised_once_the_first_is_done() -> None:
    first_done = []

    async def first() -> int:
        await asyncio.sleep(0.05)
        first_done.append(1)
        return 1

    async def failing() -> int:
        raise ValueError("bad read")

    with pytest.raises(ValueError, match="bad read"):
        await beside(first(), failing())
    assert first_done == [1]
