"""JSON-lines logs for our own loggers, behind ``TULIP_LOG_FORMAT=json``.

With ``text`` (the default) nothing changes: Celery's ``[date: LEVEL/Process]`` lines.
With ``json`` every record of ``tulip.*`` and of our packages' loggers
(``tulip_memory``, ``tulip_wire``, ``tulip_producer``, ``tulip_workers``,
``tulip_ops``) is one JSON object on one line of the process's real stderr, with no
prefix (they no longer propagate to Celery's root handler): ``time``, ``level``,
``logger``, ``message`` and, for an exception, ``exc_info``. A message that is itself
a JSON object (``tulip.events``' outcome lines) is merged into the record, not nested
as a string. Celery's and other libraries' own lines keep their format.

Formatter: python-json-logger, a ``logging.Formatter``. It plugs into the stdlib
logging Celery configures and every library already uses, with no change at the call
sites; structlog would bring its own pipeline and need its bridge to reach them.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

from tulip_wire.env import LOG_FORMAT

OUR_LOGGERS = (
    "tulip",
    "tulip_memory",
    "tulip_wire",
    "tulip_producer",
    "tulip_workers",
    "tulip_ops",
)


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """``TULIP_LOG_FORMAT``: ``text`` (default) or ``json``; anything else is refused."""
    return LOG_FORMAT.read(environ)


class JsonLines(JsonFormatter):
    """One JSON object per record; a JSON-object message becomes fields."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            json_ensure_ascii=False,
        )

    def add_fields(
        self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_record, record, message_dict)
        fields = _json_object(log_record.get("message"))
        if fields is not None:
            del log_record["message"]
            log_record.update({k: v for k, v in fields.items() if k not in log_record})


def configure(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Send our loggers to one JSON-lines handler when ``TULIP_LOG_FORMAT=json``;
    True if it did. ``stream`` defaults to the real stderr (``sys.__stderr__``: Celery
    redirects ``sys.stderr`` into its own logger)."""
    if log_format(environ) != "json":
        return False
    handler = logging.StreamHandler(stream or sys.__stderr__)
    handler.setFormatter(JsonLines())
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
    return True


def install_for_celery() -> None:
    """Apply :func:`configure` each time Celery sets up its logging (worker start)."""
    from celery.signals import after_setup_logger

    after_setup_logger.connect(_on_celery_logging, weak=False)


def _on_celery_logging(**_: Any) -> None:
    configure()


def _json_object(message: object) -> dict[str, Any] | None:
    if not isinstance(message, str) or not message.startswith("{"):
        return None
    try:
        parsed = json.loads(message)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
