"""TULIP_LOG_FORMAT=json: our loggers write JSON lines and nothing else."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from tulip_wire.logs import OUR_LOGGERS, configure, log_format


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    saved = {
        n: (logging.getLogger(n).handlers[:], logging.getLogger(n).propagate) for n in OUR_LOGGERS
    }
    try:
        yield
    finally:
        for name, (handlers, propagate) in saved.items():
            logging.getLogger(name).handlers = handlers
            logging.getLogger(name).propagate = propagate


def test_text_is_the_default_and_nothing_changes(restore_loggers: None) -> None:
    assert log_format({}) == "text"
    assert not configure(io.StringIO(), {})
    with pytest.raises(ValueError, match="TULIP_LOG_FORMAT must be one of text, json"):
        log_format({"TULIP_LOG_FORMAT": "xml"})


def test_every_record_is_one_json_object_on_one_line(restore_loggers: None) -> None:
    out = io.StringIO()
    assert configure(out, {"TULIP_LOG_FORMAT": "json"})
    logging.getLogger("tulip.events").error(json.dumps({"event_id": "e1", "outcome": "dead"}))
    logging.getLogger("tulip_workers.retry").warning("retrying %s\nin %ds", "e2", 3)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("tulip_ops.dev.supervisor").exception("worker died")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(records) == 3
    outcome, retry, died = records
    assert outcome["event_id"] == "e1" and outcome["outcome"] == "dead"  # merged, not nested
    assert outcome["level"] == "ERROR" and outcome["logger"] == "tulip.events"
    assert retry["message"] == "retrying e2\nin 3s" and "time" in retry
    assert "RuntimeError: boom" in died["exc_info"]
