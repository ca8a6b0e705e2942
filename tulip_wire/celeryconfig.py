"""Every Celery setting in one place, read from the environment (12-factor).

Queues are declared explicitly on one direct exchange; ordered work (extraction per
namespace, checkpoints per thread) goes to numbered shard queues that each have exactly
one single-process consumer. Delivery is at-least-once: a task is acknowledged only
after it finished (``acks_late``), returned to the queue if its worker dies, and a
worker holds one message at a time.
"""

from __future__ import annotations

from kombu import Exchange, Queue

from tulip_wire import env, nobroker, topology
from tulip_wire.endpoints import broker_endpoint

EXTRACT_SHARDS = env.EXTRACT_SHARDS.read()
CHECKPOINT_SHARDS = env.CHECKPOINT_SHARDS.read()
VISIBILITY_TIMEOUT = env.VISIBILITY_TIMEOUT.read()
TASK_TIME_LIMIT = env.TASK_TIME_LIMIT.read()


# No guess: unset, the URL names a transport that refuses every connection with the
# one-line error every role gives (tulip_wire.nobroker); the roles refuse to start first.
_broker = broker_endpoint(env.BROKER_URL.read() or nobroker.URL)
broker_url = _broker.url
broker_use_ssl = _broker.use_ssl
_rabbit = broker_url.startswith(("amqp", "pyamqp"))

exchange = Exchange(topology.EXCHANGE, type="direct", durable=True)


def kombu_queue(name: str, *, ordered: bool, amqp: bool) -> Queue:
    """A queue as every side declares it. RabbitMQ hands an ordered queue to one
    consumer at a time even if two attach, and refuses a redeclaration with other
    arguments, so producers and workers must agree on these."""
    args = {"x-single-active-consumer": True} if ordered and amqp else {}
    return Queue(name, exchange, routing_key=name, durable=True, queue_arguments=args)


task_queues = tuple(
    kombu_queue(q.name, ordered=q.ordered, amqp=_rabbit)
    for q in topology.declared_queues(EXTRACT_SHARDS, CHECKPOINT_SHARDS)
)
task_default_exchange = exchange.name
task_create_missing_queues = False

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
task_time_limit = TASK_TIME_LIMIT
# One list per queue on Redis (no priority lists): a priority would reorder a
# namespace, and a shard worker consumes its one list atomically
# (tulip_workers.reliable_redis).
broker_transport_options = {
    "visibility_timeout": VISIBILITY_TIMEOUT,
    "priority_steps": [0],
    **_broker.transport_options,
}
broker_connection_retry_on_startup = True

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
event_serializer = "json"

worker_send_task_events = True
task_send_sent_event = True
task_track_started = True
