"""Summarize and reindex tasks through the broker, against a real signing worker.

A client of the broker without the signing key sends the unordered tasks: an unsigned
summarize job for a thread far below ``TULIP_SUMMARIZE_OVER_TOKENS`` (it used to be
summarized, a paid call with a summary model), one signed with another key, and an
unsigned reindex batch. Each is refused before it reads anything; a genuine signed job
for that thread writes nothing either (the job checks the threshold itself), and the
same job sent again is skipped."""

from __future__ import annotations

import asyncio
import re
import uuid

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_poison import sender, wait_for
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState
from tulip_memory.summaries import SummaryStore
from tulip_wire.endpoints import redis_client
from tulip_wire.signing import signer_of
from tulip_wire.tasksig import task_kwargs
from tulip_wire.topology import REINDEX_QUEUE, REINDEX_TASK, SUMMARIZE_QUEUE, SUMMARIZE_TASK
from tulip_workers.summarizer import SummaryScheduler

KEY = "k" * 48
T = "victim"


def test_unsigned_and_replayed_unordered_tasks_do_nothing(pipeline: Pipeline) -> None:
    store = get_checkpointer(pipeline.env()["TULIP_CHECKPOINT_URL"])
    assert isinstance(store, DeltaCheckpointer)
    threads = tenant_checkpointer(store, T)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    turns = [Message(role=Role.USER, content=f"Turn {i}: my card is 4111") for i in range(30)]
    asyncio.run(threads.save(AgentState(messages=tuple(turns)), thread))
    worker = pipeline.workers.start(
        "pooled",
        [SUMMARIZE_QUEUE, REINDEX_QUEUE],
        **pipeline.env(TULIP_EVENT_SIGNING_KEY=KEY),
    )
    # The genuine job's token, as the checkpoint worker's scheduler leaves it.
    tokens: list[str] = []
    scheduler = SummaryScheduler(
        redis_client(pipeline.broker_url), lambda *job: tokens.append(job[2])
    )
    assert scheduler.maybe_schedule(T, thread)
    genuine = [T, thread, tokens[0]]
    other = signer_of("o" * 48)
    sends = {
        "unsigned": (SUMMARIZE_TASK, SUMMARIZE_QUEUE, [T, thread], {}),
        "other key": (
            SUMMARIZE_TASK, SUMMARIZE_QUEUE, genuine, task_kwargs(other, SUMMARIZE_TASK, genuine)
        ),
        "unsigned batch": (REINDEX_TASK, REINDEX_QUEUE, [1, 0, T], {}),
        "genuine": (
            SUMMARIZE_TASK, SUMMARIZE_QUEUE, genuine,
            task_kwargs(signer_of(KEY), SUMMARIZE_TASK, genuine),
        ),
    }  # fmt: skip
    app = sender(pipeline.broker_url)
    ids = {name: uuid.uuid4().hex for name in [*sends, "replay"]}
    try:
        for name, (task, queue, args, kwargs) in sends.items():
            app.send_task(task, args=args, kwargs=kwargs, queue=queue, task_id=ids[name])
        wait_for("the genuine job", lambda: f"[{ids['genuine']}] succeeded" in worker.output())
        task, queue, args, kwargs = sends["genuine"]
        app.send_task(task, args=args, kwargs=kwargs, queue=queue, task_id=ids["replay"])
    finally:
        app.close()

    def result(name: str) -> str:
        found = re.search(rf"\[{ids[name]}\] succeeded in \S+: (.*)", worker.output())
        return found.group(1)[1:-1] if found else ""  # the result's repr, quotes off

    wait_for("every task done", lambda: all(result(n) for n in ids), timeout=60)
    assert result("unsigned").startswith("refused: ForgedTask: unsigned tulip.thread.summarize")
    assert result("other key").startswith("refused: ForgedTask: bad signature")
    assert result("unsigned batch").startswith("refused: ForgedTask: unsigned tulip.memory.reindex")
    assert result("genuine").startswith("not due:")
    assert result("replay").startswith("skipped: not the pending job of its thread")
    assert asyncio.run(SummaryStore(threads.storage).get(thread)) is None
    assert "4111" not in worker.output()
