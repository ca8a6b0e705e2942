"""A publish in one Redis round trip: sequence number, published marker, layout check
and the enqueue, in one script.

The general path (:meth:`tulip_producer.producer._Publisher.publish`) takes two: a
pipeline that numbers the event, then Celery's ``send_task``. Where the broker and the
sequence-number Redis are one database, nothing is signed and no pending list is
written, this path builds the Celery message itself (protocol 2, exactly the fields
``send_task`` sends, the body as plain JSON rather than base64) around the place of
the sequence number (the envelope's one encoding, :class:`~tulip_wire.events.Encoded`),
and one script (``tulip_wire/lua/publish_direct.lua``) numbers the
event, marks it published and pushes the message onto the shard queue, as kombu's
Redis transport would. When the layout record (:mod:`tulip_wire.shardlayout`) names
another shard count, the script does nothing and the general path takes over.

All of a script's keys must live on one Redis node: on a Redis Cluster, this path
needs the keys hash-tagged together, which they are not; use the general path there.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import redis

import tulip_wire
from tulip_wire.events import Encoded
from tulip_wire.published import PUBLISHED_KEY_PREFIX
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import layout_key
from tulip_wire.topology import SEQ_KEY_PREFIX

#: Stands where the script writes the sequence number while the message is built:
#: letters only, so no level of JSON escaping changes it.
_SEQ_SLOT = "tulipSEQslot"
_SCRIPT = (Path(tulip_wire.__file__).parent / "lua" / "publish_direct.lua").read_text()
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class DirectPublisher:
    """Numbers and enqueues an event with one script call (see the module doc)."""

    def __init__(self, client: redis.Redis, status_ttl: float) -> None:
        self._script = client.register_script(_SCRIPT)
        self._ttl_ms = int(status_ttl * 1000)
        self._origin = f"gen{os.getpid()}@{socket.gethostname()}"
        self._reply_to = str(uuid.uuid4())

    def publish(self, wire: Encoded, task: str, router: ShardRouter) -> int | None:
        """Publish ``wire`` on ``router``'s queue, numbered by the script; the sequence
        number it got, or ``None`` when the layout record disagrees with ``router`` (or
        the message is ambiguous): then nothing was done."""
        env = wire.env
        queue = router.queue(env.key)
        message = self.message(task, env.id, env.type, queue, wire.head + _SEQ_SLOT + wire.tail)
        parts = message.split(_SEQ_SLOT)
        if len(parts) != 2:
            return None  # the event's own text holds the slot's word: the general path
        keys = [SEQ_KEY_PREFIX + env.key, PUBLISHED_KEY_PREFIX + env.id]
        keys += [layout_key(router.prefix), queue]
        args: list[str | int] = [env.key, self._ttl_ms, str(router.shards), *parts]
        seq, _ = self._script(keys=keys, args=args)
        return None if int(seq) < 0 else int(seq)

    def message(self, task: str, task_id: str, kind: str, queue: str, text: str) -> str:
        """The Celery protocol-2 message of one task with ``[text]`` as its args, as
        kombu's Redis transport stores it."""
        argsrepr = f"[<{kind} {task_id}>]"  # the sequence number is in the logs
        headers: dict[str, Any] = {
            "lang": "py",
            "task": task,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": argsrepr,
            "kwargsrepr": "{}",
            "origin": self._origin,
            "ignore_result": None,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        }
        properties = {
            "correlation_id": task_id,
            "reply_to": self._reply_to,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "delivery_tag": str(uuid.uuid4()),
        }
        body = json.dumps([[text], {}, _EMBED])
        return json.dumps(
            {
                "body": body,
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": headers,
                "properties": properties,
            }
        )
