"""A worker is ready only once its database answers (shard and reindex workers).

Without this a worker whose ``TULIP_DATABASE_URL`` points nowhere (a wrong host, a
socket directory that does not exist) prints Celery's banner and "ready", takes its
first event and only then meets the error, waiting on it in place with nothing in the
log but a bare ``FileNotFoundError``. :func:`install` checks before the worker
consumes (``celeryd_after_setup``, the step where the unacked restore runs too), with
the connection and table checks its first event would make (a reindex worker's: its
store's connection, role and schema checks, on a store closed again before the pool
forks):

- Postgres cannot be reached (refused, no such socket, a name that does not resolve,
  starting up): one line at once naming ``TULIP_DATABASE_URL`` and where it points
  (credentials stripped), then one every :data:`RETRY_SECONDS`, and the worker does
  not report ready until Postgres answers. An operator expects a worker to wait for a
  database that is not up *yet* (a stack starting, Postgres restarting), as it waits
  for its broker; exiting would turn every start-order race into a crash loop.
  (Errors at start carry no event content, so they are logged as they are.)
- Postgres answers but refuses (wrong password, no such database, tables not
  migrated): no wait can fix that, so the worker logs the one line and exits non-zero,
  for its supervisor to show.

A worker that calls a model (an extraction shard with ``TULIP_EXTRACT_MODEL``, the
summary queue with ``TULIP_SUMMARY_MODEL``) through litellm also imports it (seconds,
tens of them on a loaded host) before it is ready, so its first events do not wait for
that import, and a prefork pool's children inherit it loaded. An extraction model on an
OpenAI-compatible server goes through the OpenAI SDK (:mod:`tulip_memory.chat`), and
such a worker never imports litellm.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from celery import Celery, signals
from celery.exceptions import WorkerShutdown

from tulip_memory import model_map
from tulip_memory.config import database_url
from tulip_memory.credentials import redact_url
from tulip_memory.model_calls import import_litellm
from tulip_memory.store import PgMemory
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX, REINDEX_QUEUE, SUMMARIZE_QUEUE
from tulip_workers.event_worker import EventWorker
from tulip_workers.failures import is_unreachable
from tulip_workers.redelivery import EXIT_FAILURE, ordered_queues
from tulip_workers.retry import describe
from tulip_workers.runtime import WorkerRuntime, event_worker_for, runtime

log = logging.getLogger(__name__)
#: How often a worker waiting for its database says so again.
RETRY_SECONDS = 5.0


def _database_checks(queue_names: Iterable[str]) -> list[Callable[[], None]]:
    """What a worker consuming ``queue_names`` checks of Postgres before it is ready:
    each shard queue's event worker reaching its tables, a reindex worker's store."""
    names = list(queue_names)
    makers = {m for q in ordered_queues(names) if (m := event_worker_for(q)) is not None}
    checks: list[Callable[[], None]] = [
        functools.partial(_event_worker_ready, make) for make in makers
    ]
    if REINDEX_QUEUE in names:
        checks.append(_reindex_store_ready)
    return checks


def _event_worker_ready(make: Callable[[WorkerRuntime], EventWorker]) -> None:
    runtime().run(make(runtime()).ready())


def _reindex_store_ready() -> None:
    runtime().run(_store_answers(runtime().settings.store.store()))


async def _store_answers(store: PgMemory) -> None:
    """Connect ``store`` (role and schema checked, as its first use would), then close it."""
    try:
        async with store.connection():
            pass
    finally:
        await store.close()


def wait_for_database(queue_names: Iterable[str], retry_seconds: float = RETRY_SECONDS) -> None:
    """Return once what the worker of ``queue_names`` needs of Postgres answers (shard
    queues' event workers reach their tables, a reindex worker's store connects); log
    and wait while Postgres is unreachable; ``WorkerShutdown`` if it refuses."""
    checks = _database_checks(queue_names)
    if not checks:
        return
    try:
        where = redact_url(database_url())
    except ValueError as e:  # not set at all
        log.critical("%s", e)
        raise WorkerShutdown(EXIT_FAILURE) from e
    log.info("connecting to Postgres at %s (TULIP_DATABASE_URL)", where)
    for check in checks:
        while True:
            try:
                check()
                break
            except Exception as e:
                if not is_unreachable(e):
                    log.critical(
                        "Postgres at %s (TULIP_DATABASE_URL) refused this worker: %s",
                        where,
                        describe(e),
                    )
                    raise WorkerShutdown(EXIT_FAILURE) from e
                log.error(
                    "cannot reach Postgres at %s (TULIP_DATABASE_URL): %s; not ready, "
                    "retrying in %.0fs",
                    where,
                    describe(e.__cause__ or e),
                    retry_seconds,
                )
                time.sleep(retry_seconds)
    log.info("Postgres at %s answers", where)


def _extracts(queue_names: Iterable[str]) -> bool:
    return any(q.startswith(f"{EXTRACT_QUEUE_PREFIX}.") for q in queue_names)


def needs_litellm(queue_names: Iterable[str]) -> bool:
    """Whether the worker of ``queue_names`` calls a model through litellm with the
    configured settings (an OpenAI-compatible extraction server is called through the
    OpenAI SDK: :mod:`tulip_memory.chat`)."""
    names = list(queue_names)
    s = runtime().settings
    via_litellm = s.extractor is not None and not s.extractor.chat_model.direct
    return (_extracts(names) and via_litellm) or (
        SUMMARIZE_QUEUE in names and bool(s.summary_model)
    )


def load_model_client(queue_names: Iterable[str]) -> None:
    """Before the worker of ``queue_names`` is ready: import litellm if it calls a
    model with it, and read the extraction model's entry of litellm's model map if
    that goes through the OpenAI SDK (its price and JSON-schema support)."""
    names = list(queue_names)
    extraction = runtime().settings.extractor
    if _extracts(names) and extraction is not None and extraction.chat_model.direct:
        model_map.model_entry(extraction.model)
        # The SDK its first call would import (seconds): not on a takeover's first event.
        with contextlib.suppress(ImportError):
            importlib.import_module("openai")
    if not needs_litellm(names):
        return
    started = time.monotonic()
    import_litellm()
    log.info("model client (litellm) loaded in %.1fs", time.monotonic() - started)


def install(app: Celery) -> None:
    """Before each worker of ``app`` consumes, wait for its shard queues' database, and
    load the model client it will call."""

    def check_before_consuming(instance: Any = None, **_: Any) -> None:
        if instance is not None and instance.app is app:
            queues = instance.app.amqp.queues.consume_from
            wait_for_database(queues)
            load_model_client(queues)

    signals.celeryd_after_setup.connect(
        check_before_consuming, weak=False, dispatch_uid=f"tulip-readiness-{id(app)}"
    )
