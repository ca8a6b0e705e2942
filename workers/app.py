"""The Celery application; every setting comes from ``celeryconfig``."""

from __future__ import annotations

from celery import Celery

app = Celery("tulip_memory", include=["workers.tasks"])
app.config_from_object("celeryconfig")
