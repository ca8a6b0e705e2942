"""LangGraph's own conformance suite, every capability, on every delta storage backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from tests.langgraph.conftest import SaverFactory
from tulip_memory.langgraph import TulipSaver


async def test_tulip_saver_passes_the_whole_suite(make_saver: SaverFactory) -> None:
    @checkpointer_test(name="TulipSaver")
    async def saver() -> AsyncIterator[TulipSaver]:
        yield make_saver()

    report = await validate(saver)

    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}  # every extension, tested
