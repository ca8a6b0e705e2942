"""The Celery application; every setting comes from ``celeryconfig``."""

from __future__ import annotations

from celery import Celery

from workers.redelivery import install as install_redelivery

app = Celery("tulip_memory", include=["workers.tasks"])
app.config_from_object("celeryconfig")
install_redelivery(app)
