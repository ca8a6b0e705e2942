"""Death counting on RabbitMQ: a message that kills its worker every time ends as a
dead letter after N deaths, as on Redis; messages Celery refuses before any task
runs are dead letters there too; and two workers of one shard queue: the broker's
single active consumer delivers to one, and to the other once the first dies, in order
(real RabbitMQ, real workers).

RabbitMQ requeues a dead consumer's message by itself, so no restore step sees the
death; the runs are counted in the Redis of ``TULIP_REDIS_URL`` instead. Each test
gets a virtual host of its own (``rabbitmqctl``), so nothing else on the server sees
its queues. Skipped when RabbitMQ is not reachable at 127.0.0.1:5672 or
``rabbitmqctl`` cannot add a virtual host.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.pipeline.test_concurrency import said, users_on
from tests.pipeline.test_faults import model_env, session, shard_of
from tests.pipeline.test_poison import Killer, wait_for
from tests.pipeline.test_rejected import refusals_are_dead_letters
from tests.pipeline.test_shards import WhoAsked, applied, first_asks, shard_worker
from tests.producer.test_publish import rabbitmq_reachable
from tests.support.openai_server import FakeOpenAI
from tests.support.pg import dead_reason
from tulip_ops.dev.embedded import run_async
from tulip_producer import Producer

pytestmark = pytest.mark.skipif(
    not rabbitmq_reachable() or shutil.which("rabbitmqctl") is None,
    reason="RabbitMQ (with rabbitmqctl) is not available at 127.0.0.1:5672",
)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


@pytest.fixture
def vhost() -> Iterator[str]:
    """The URL of a RabbitMQ virtual host of this test's own, deleted after it."""
    name = f"tulip-test-{uuid.uuid4().hex[:10]}"
    try:
        rabbitmqctl("add_vhost", name)
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"rabbitmqctl cannot add a virtual host: {e}")
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{name}"
    finally:
        rabbitmqctl("delete_vhost", name)


def test_a_message_that_kills_its_worker_every_time_ends_as_a_dead_letter_on_rabbitmq(
    pipeline: Pipeline, fake_openai: FakeOpenAI, vhost: str
) -> None:
    model = Killer(victim=1)
    fake_openai.default_chat = model
    ns = ("acme", "users", "rabbit-killer")
    k = shard_of(ns)
    settings = {
        **model_env(fake_openai),
        "TULIP_MAX_WORKER_DEATHS": "2",
        "TULIP_BROKER_URL": vhost,
        "TULIP_REDIS_URL": pipeline.broker_url,  # sequences, pending states, death counts
    }
    pipeline.start_shard(k, **settings)
    producer = Producer.from_urls(
        vhost,
        pipeline.broker_url,
        spool_dir=pipeline.spool,
        extract_shards=SHARDS,
        checkpoint_shards=SHARDS,
    )
    with producer:
        ids = [producer.session_ended(ns, "t", session(i, c)) for i, c in [(1, "red"), (2, "teal")]]
        assert producer.flush(timeout=30)
    for death in (1, 2):
        # Generous: a loaded host takes long to import the model client in a fresh worker.
        wait_for(
            f"death {death} in the model call",
            lambda d=death: model.asked.count(1) >= d,
            timeout=240,
        )
        pipeline.workers.started[-1].kill()
        pipeline.start_shard(k, **settings)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=90)
        killer, after = reader.status(ids[0], tenant="acme"), reader.status(ids[1], tenant="acme")
    assert killer.state == "dead"
    assert (
        run_async(dead_reason(pipeline.admin_url, ids[0]))
        == "WorkerLost: killed its worker 2 times"
    )
    assert after.state == "applied"
    assert model.asked == [1, 1, 2]  # the third delivery was not run, and nothing overtook it


def test_messages_celery_refuses_are_dead_letters_on_rabbitmq(
    pipeline: Pipeline, vhost: str
) -> None:
    refusals_are_dead_letters(pipeline, vhost)


def test_single_active_consumer_one_worker_consumes_the_other_takes_over_in_order(
    pipeline: Pipeline, fake_openai: FakeOpenAI, vhost: str
) -> None:
    model = WhoAsked(delay=0.02)
    fake_openai.default_chat = model
    env = {"TULIP_BROKER_URL": vhost, "TULIP_REDIS_URL": pipeline.broker_url}
    a, b = pipeline.workers.start_all(
        [shard_worker(pipeline, fake_openai, n, **env) for n in ("rabbit-a", "rabbit-b")]
    )
    users = users_on(0, 3, "rabbit")
    producer = Producer.from_urls(
        vhost,
        pipeline.broker_url,
        spool_dir=pipeline.spool,
        extract_shards=SHARDS,
        checkpoint_shards=SHARDS,
    )
    with producer:
        first = [producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
                 for n in range(1, 6) for u in users]  # fmt: skip
        assert producer.flush(timeout=30)
        applied(pipeline, first)
        (active,) = model.workers()  # one consumer had them all
        owner, other = (a, b) if active == a.name else (b, a)
        later = [producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
                 for n in range(6, 16) for u in users]  # fmt: skip
        assert producer.flush(timeout=30)
        while sum(map(len, model.asked.values())) < len(first) + 4:
            time.sleep(0.005)
        owner.kill()
        applied(pipeline, later)
    assert model.workers() == {owner.name, other.name}
    for u in users:
        assert first_asks(model.asked[u]) == list(range(1, 16))
