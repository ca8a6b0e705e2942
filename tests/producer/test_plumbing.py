"""The broker plumbing that bounds a publish: pure functions, checked without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.producer.queues import take_all
from tulip_producer import Producer, ProducerSettings
from tulip_producer.producer import celery_app, extract_queues, transport_options
from tulip_wire import celeryconfig
from tulip_wire.endpoints import kombu_url


def test_kombu_url_spells_redis_unix_sockets_its_own_way() -> None:
    assert kombu_url("unix:///run/redis.sock") == "redis+socket:///run/redis.sock"
    assert (
        kombu_url("unix:///run/redis.sock?db=3") == "redis+socket:///run/redis.sock?virtual_host=3"
    )
    assert kombu_url("redis://h:6379/2") == "redis://h:6379/2"
    assert kombu_url("amqp://guest:guest@h:5672//") == "amqp://guest:guest@h:5672//"


def test_redis_publishes_are_bounded_without_a_retry_loop() -> None:
    options = transport_options(ProducerSettings(broker_url="redis://h", publish_timeout=0.5))
    assert options == {"max_retries": 0, "socket_timeout": 0.5, "socket_connect_timeout": 0.5}


def test_rabbitmq_publishes_are_bounded_and_confirmed() -> None:
    settings = ProducerSettings(broker_url="amqp://h//", redis_url="redis://h", publish_timeout=2)
    assert transport_options(settings) == {
        "max_retries": 0,
        "confirm_publish": True,
        "read_timeout": 2,
        "write_timeout": 2,
    }


def test_the_celery_app_is_celeryconfig_on_the_producers_broker() -> None:
    settings = ProducerSettings(
        broker_url="unix:///run/r.sock?db=2", extract_shards=3, publish_timeout=0.7
    )
    conf = celery_app(settings).conf
    assert conf.task_acks_late and conf.task_serializer == "json"  # from celeryconfig
    assert conf.broker_url == "redis+socket:///run/r.sock?virtual_host=2"
    assert conf.broker_connection_timeout == 0.7 and conf.broker_heartbeat == 0
    visibility = celeryconfig.broker_transport_options["visibility_timeout"]
    assert conf.broker_transport_options["visibility_timeout"] == visibility
    assert conf.broker_transport_options["max_retries"] == 0
    assert [q.name for q in conf.task_queues] == [
        *(f"memory.extract.{k}" for k in range(3)),
        *(f"memory.checkpoint.{k}" for k in range(settings.checkpoint_shards)),
    ]


@pytest.mark.parametrize(
    ("broker", "arguments"),
    [
        ("redis://h/0", {}),
        ("amqp://h//", {"x-single-active-consumer": True}),  # as the workers declare them
    ],
)
def test_shard_queues_are_declared_like_the_workers_declare_them(
    broker: str, arguments: dict[str, bool]
) -> None:
    settings = ProducerSettings(broker_url=broker, redis_url="redis://h/0")
    for queue in extract_queues(settings):
        assert queue.exchange.name == "memory" and queue.exchange.type == "direct"
        assert queue.routing_key == queue.name and queue.durable
        assert queue.queue_arguments == arguments


def test_producer_from_env(
    broker_url: str, tmp_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TULIP_BROKER_URL", broker_url)
    monkeypatch.setenv("TULIP_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("TULIP_EXTRACT_SHARDS", "4")
    with Producer.from_env() as producer:
        event_id = producer.session_ended((tenant,), "t", [{"role": "user", "content": "hi"}])
        assert producer.settings.spool_dir == tmp_path / "spool"
    assert [d.task_id for d in take_all(producer.settings)] == [event_id]
