"""A publish in one Redis round trip: sequence number, published marker, layout check
and the enqueue, in one script.

The general path (:meth:`tulip_producer.producer._Publisher.publish`) takes two: a
pipeline that numbers the event, then Celery's ``send_task``. Where the broker and the
sequence-number Redis are one database, nothing is signed and no pending list is
written, this path builds the Celery message itself (protocol 2, exactly the fields
``send_task`` sends, the body as plain JSON rather than base64) with a placeholder for
the sequence number, and one script (``tulip_wire/lua/publish_direct.lua``) numbers the
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
from tulip_wire.events import Envelope
from tulip_wire.published import PUBLISHED_KEY_PREFIX
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import layout_key
from tulip_wire.topology import SEQ_KEY_PREFIX

#: A sequence number no real key reaches: stands where the script writes the real one.
MARK_SEQ = 9_007_199_254_740_993
#: ``"seq": MARK_SEQ`` of the envelope as it reads inside the stored message: escaped
#: once as the text in the task's args, once more as the body in the message.
_PLACEHOLDER = json.dumps(json.dumps(f'"seq": {MARK_SEQ}')[1:-1])[1:-1]
_SCRIPT = (Path(tulip_wire.__file__).parent / "lua" / "publish_direct.lua").read_text()
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class DirectPublisher:
    """Numbers and enqueues an event with one script call (see the module doc)."""

    def __init__(self, client: redis.Redis, status_ttl: float) -> None:
        self._script = client.register_script(_SCRIPT)
        self._ttl_ms = int(status_ttl * 1000)
        self._origin = f"gen{os.getpid()}@{socket.gethostname()}"
        self._reply_to = str(uuid.uuid4())

    def publish(self, env: Envelope, text: str, task: str, router: ShardRouter) -> int | None:
        """Publish ``text`` (``env`` encoded with :data:`MARK_SEQ` as its sequence
        number) on ``router``'s queue; the sequence number it got, or ``None`` when the
        layout record disagrees with ``router`` (then nothing was done)."""
        queue = router.queue(env.key)
        message = self.message(task, env.id, env.type, queue, text)
        if message.count(_PLACEHOLDER) != 1:
            return None  # not unambiguous (never seen): the general path does it
        keys = [SEQ_KEY_PREFIX + env.key, PUBLISHED_KEY_PREFIX + env.id]
        keys += [layout_key(router.prefix), queue]
        args: list[str | int] = [env.key, self._ttl_ms, str(router.shards), message]
        args += [_PLACEHOLDER, _PLACEHOLDER.removesuffix(str(MARK_SEQ))]
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
