"""Messages Celery refuses before any task body runs become dead letters.

Celery decides some messages itself, on the consumer thread, before a task could see
them: a task name no worker registered (``on_unknown_task``), a content type outside
``accept_content`` such as pickle (``on_invalid_task``), bytes that do not decode
(``on_decode_error``), headers without a task name (``on_unknown_message``). It logs
each and acks or rejects it: gone, with no dead letter. Worse, a body that decodes but
is not a task's ``[args, kwargs, embed]``, or headers without a task id, make Celery's
own handler raise: the worker stops ("Unrecoverable error"), its restart gets the
message back first and stops again, and the shard is stuck for good.

:class:`Consumer` (the workers' ``worker_consumer``) closes both. A message that is not
a well-formed protocol 2 task message (:func:`check_task_message`) is refused before
Celery's handler sees it, and every refusal on a shard queue files a dead letter
first (under the task id when readable, else a digest of the body; the body's bytes
as they came, sha256, size, reason; a minimal letter without the bytes if even that
cannot be stored) through that queue's event worker, then lets Celery ack or reject
the message. A refusal on another queue is only logged, as Celery does. The database
being away is waited for up to :data:`FILE_TIMEOUT`; then the message goes back to its
queue to be refused again, so the consumer thread is never held for good.

Below Celery, an item on a Redis shard queue that is no kombu message at all (not
JSON, no message envelope) made kombu raise on the consumer thread: the worker
stopped with the item dropped. :func:`install` files those the same way
(:func:`refuse_item`, called by :mod:`tulip_workers.reliable_redis`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from celery.exceptions import InvalidTaskError
from celery.worker.consumer import consumer as celery_consumer
from celery.worker.consumer.consumer import Consumer as CeleryConsumer
from kombu.exceptions import ContentDisallowed, DecodeError

from tulip_workers import reliable_redis
from tulip_workers.outcomes import dead_letter_summary
from tulip_workers.retry import describe
from tulip_workers.runtime import event_worker_for, runtime

log = logging.getLogger(__name__)

#: How long one refusal may wait for the database before its message is put back.
FILE_TIMEOUT = 30.0
#: The pause before a message whose dead letter could not be filed is put back.
REQUEUE_PAUSE = 2.0


def check_task_message(message: Any) -> None:
    """Refuse what Celery's own handler would crash on: headers that are not a
    protocol 2 task message's (task name and id as text, a time limit pair) and a
    body that is not ``[args, kwargs, embed]``. Raises :class:`InvalidTaskError`, or
    the ``ContentDisallowed``/``DecodeError`` of decoding the body."""
    headers = message.headers
    if not isinstance(headers, dict):
        raise InvalidTaskError("not a task message: its headers are not a mapping")
    for field in ("task", "id"):
        if not isinstance(headers.get(field), str) or not headers[field]:
            raise InvalidTaskError(f"not a task message: no task {field} in its headers")
    limits = headers.get("timelimit")
    if limits is not None and not (
        isinstance(limits, list | tuple)
        and len(limits) == 2
        and all(v is None or isinstance(v, int | float) for v in limits)
    ):
        raise InvalidTaskError("not a task message: its timelimit is not [hard, soft]")
    payload = message.payload
    if not (
        isinstance(payload, list | tuple)
        and len(payload) == 3
        and isinstance(payload[0], list | tuple)
        and isinstance(payload[1], dict)
        and (payload[2] is None or isinstance(payload[2], dict))
    ):
        raise InvalidTaskError("not a task message: its body is not [args, kwargs, embed]")


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer, whose refusals on shard queues become dead letters."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        celery_handler = super().create_task_handler(*args, **kwargs)

        def on_task_received(message: Any) -> Any:
            try:
                check_task_message(message)
            except (InvalidTaskError, ContentDisallowed) as exc:
                return self.on_invalid_task(None, message, exc)
            except DecodeError as exc:
                return self.on_decode_error(message, exc)
            return celery_handler(message)

        return on_task_received

    def on_unknown_message(self, body: Any, message: Any) -> None:
        reason = "InvalidTaskError: not a task message (no task name in its headers)"
        if self._dead_letter(message, reason):
            super().on_unknown_message(body, message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        reason = f"NotRegistered: no task {_headers(message).get('task')!r} on this worker"
        if self._dead_letter(message, reason, failed=False):
            super().on_unknown_task(body, message, exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        if self._dead_letter(message, describe(exc)):
            super().on_invalid_task(body, message, exc)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        if self._dead_letter(message, describe(exc)):
            super().on_decode_error(message, exc)

    def _dead_letter(self, message: Any, reason: str, *, failed: bool = True) -> bool:
        """File the dead letter of a refused message on a shard queue; whether Celery
        may now ack or reject it (``False``: it was put back instead). ``failed``:
        also tell Flower the task failed (Celery does for an unknown task itself)."""
        queue = (getattr(message, "delivery_info", None) or {}).get("routing_key")
        task_id = _headers(message).get("id")
        reason = f"{reason} [refused by Celery before any task ran]"
        if not file_refusal(_raw(message), task_id, reason, queue):
            message.reject(requeue=True)
            return False
        if failed and isinstance(task_id, str) and self.event_dispatcher is not None:
            where = queue if isinstance(queue, str) else None
            summary = dead_letter_summary(reason, event_id=task_id, key=None, where=where)
            self.event_dispatcher.send("task-failed", uuid=task_id, exception=summary)
        return True


def file_refusal(raw: bytes, task_id: object, reason: str, queue: object) -> bool:
    """File the dead letter of ``raw``, refused on ``queue`` (nothing to file on a queue
    that is no shard queue); whether it is filed (``False`` after :data:`REQUEUE_PAUSE`:
    the database stayed away for :data:`FILE_TIMEOUT`, put the message back)."""
    worker = event_worker_for(queue)
    if worker is None:
        return True
    try:
        filing = worker(runtime()).refused(raw, task_id, reason, str(queue))
        runtime().run(asyncio.wait_for(filing, FILE_TIMEOUT))
    except Exception:
        log.exception("the dead letter of a message refused on %s is not filed", queue)
        time.sleep(REQUEUE_PAUSE)
        return False
    return True


def refuse_item(queue: str, item: bytes, error: BaseException) -> bool:
    """An item on shard queue ``queue`` that is no kombu message at all (not JSON, no
    message envelope: Celery never sees it), as a dead letter; whether it is filed
    (:func:`tulip_workers.reliable_redis.refuse_items_with`)."""
    reason = f"{describe(error)} [not a kombu message: refused before Celery saw it]"
    return file_refusal(item, _item_task_id(item), reason, queue)


def _item_task_id(item: bytes) -> str | None:
    """The task id an item names in its headers, when it is JSON that has one."""
    try:
        headers = json.loads(item).get("headers")
        task_id = headers.get("id")
    except Exception:
        return None
    return task_id if isinstance(task_id, str) else None


def _body_untold(message: Any, body: Any) -> str:
    """What Celery's refusal log lines say of a message's body: its size, never its
    bytes (they may hold a conversation; the dead letter keeps them)."""
    raw = getattr(message, "body", b"")
    size = len(raw) if isinstance(raw, bytes | bytearray | str) else 0
    return f"<body of {size} bytes, not logged: see its dead letter>"


def install() -> None:
    """Refusals for what never reaches Celery too: items on a Redis shard queue that
    are no kombu message (:mod:`tulip_workers.reliable_redis`); and Celery's own log
    lines of a refused message hold no body."""
    reliable_redis.refuse_items_with(refuse_item)
    celery_consumer.dump_body = _body_untold


def _headers(message: Any) -> dict[str, Any]:
    headers = getattr(message, "headers", None)
    return headers if isinstance(headers, dict) else {}


def _raw(message: Any) -> bytes:
    body = getattr(message, "body", b"")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    return str(body).encode("utf-8", "surrogatepass")
