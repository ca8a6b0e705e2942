"""The Celery application; every setting comes from ``tulip_wire.celeryconfig``, or from
the module ``CELERY_CONFIG_MODULE`` names (what ``celery --config MODULE`` sets: a
deployment's ``celeryconfig.py``, which re-exports those settings)."""

from __future__ import annotations

import os

from celery import Celery, signals

from tulip_wire.logs import install_for_celery as install_json_logs
from tulip_wire.nobroker import refuse_to_start
from tulip_workers.parking import install as install_parking
from tulip_workers.poolinfo import install as install_poolinfo
from tulip_workers.priority import install as install_priority
from tulip_workers.readiness import install as install_readiness
from tulip_workers.redelivery import install as install_redelivery
from tulip_workers.refusals import install as install_refusals

app = Celery("tulip_memory", include=["tulip_workers.tasks"])
signals.celeryd_init.connect(refuse_to_start, weak=False)  # no broker guessed
app.config_from_object(os.environ.get("CELERY_CONFIG_MODULE") or "tulip_wire.celeryconfig")
# Messages Celery refuses before any task runs become dead letters (tulip_workers.refusals).
app.conf.worker_consumer = "tulip_workers.refusals:Consumer"
install_refusals()  # and items on a Redis shard queue that are no kombu message at all
install_priority(app)  # batch workers (reindex) yield the cores to the request path
install_parking()  # a key's backlog waits in order outside the reservation (Redis)
install_readiness(app)  # no "ready" before the database answers (the model client loaded)
# After readiness: a shard queue on Redis leaves what Celery consumes at start, until the
# worker holds its lease (tulip_workers.lease); readiness checks it first.
install_redelivery(app)
install_poolinfo(app)  # stats (Flower) report C, not the 4·C threads
install_json_logs()  # TULIP_LOG_FORMAT=json: our loggers as JSON lines
