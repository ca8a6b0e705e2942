"""A tenant over its publish quota is refused at the door: a typed error naming the
tenant and the limit, and nothing numbered, marked, appended or queued."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.producer.conftest import MakeProducer
from tests.producer.queues import take_all
from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Message, Role
from tulip_producer.quota import PublishQuota, QuotaExceeded
from tulip_wire.events import thread_key
from tulip_wire.pending import PendingStates
from tulip_wire.topology import seq_key

SAID = [Message(role=Role.USER, content="hello")]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "general"])
def test_an_over_quota_publish_is_refused_and_nothing_is_queued(
    broker_url: str, make_producer: MakeProducer, direct: bool
) -> None:
    quota = PublishQuota(rate=0.01, burst=2)  # two now, the next in 100 s
    producer = make_producer(broker_url, quota=quota, direct_publish=direct)
    noisy, quiet = f"noisy-{uuid.uuid4().hex[:8]}", f"quiet-{uuid.uuid4().hex[:8]}"
    producer.session_ended((noisy, "a"), "t", SAID)
    producer.session_ended((noisy, "b"), "t", SAID)
    with pytest.raises(QuotaExceeded) as refused:
        producer.session_ended((noisy, "c"), "t", SAID)
    assert isinstance(refused.value, TulipMemoryError)
    assert (refused.value.tenant, refused.value.rate, refused.value.burst) == (noisy, 0.01, 2)
    assert 0 < refused.value.retry_after <= 100 and noisy in str(refused.value)
    with pytest.raises(QuotaExceeded):
        producer.checkpoint_saved("th", {"messages": []}, tenant=noisy)
    producer.session_ended((quiet, "a"), "t", SAID)  # another tenant's bucket
    assert producer.spooled == 0
    sent = take_all(producer.settings)
    assert sorted(d.envelope.key.split("\x1f")[1] for d in sent) == ["a", "a", "b"]
    client = redis.Redis.from_url(broker_url)
    assert not client.exists(seq_key(f"{noisy}\x1fc"))
    assert PendingStates(client).entries(noisy, "th") == []
    assert not client.exists(seq_key(thread_key(noisy, "th")))


def test_without_a_quota_no_bucket_is_kept(broker_url: str, make_producer: MakeProducer) -> None:
    producer = make_producer(broker_url)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    for i in range(5):
        producer.session_ended((tenant, str(i)), "t", SAID)
    assert len(take_all(producer.settings)) == 5
    assert redis.Redis.from_url(broker_url).keys(f"tulip:quota:{tenant}*") == []
