"""The broker URL of a process started without ``TULIP_BROKER_URL``: none.

Celery would fall back to ``amqp://guest@localhost//``, and a default Redis URL would
be some unrelated Redis (the exporter once reported ``tulip_broker_up 1`` and empty
queues for one). Every role refuses to start without the variable
(:data:`tulip_wire.env.MISSING_BROKER_URL`); what connects anyway (Flower or
``celery inspect`` started by hand) gets this URL, whose transport refuses every
connection with the same one-line error.
"""

from __future__ import annotations

import sys
from typing import Any

from kombu import transport as kombu_transports
from kombu.transport import base

from tulip_wire.env import BROKER_URL, MISSING_BROKER_URL

SCHEME = "tulip-no-broker"
URL = f"{SCHEME}://"


class Transport(base.Transport):  # type: ignore[misc]
    """A kombu transport that cannot be made: the broker is not set."""

    def __init__(self, *_: Any, **__: Any) -> None:
        raise ValueError(MISSING_BROKER_URL)


kombu_transports.TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")


#: The exit status of a role refused for want of a broker (the CLI's usage error).
EXIT_NO_BROKER = 2


def refuse_to_start(**_: Any) -> None:
    """A ``celeryd_init`` receiver: a worker started without ``TULIP_BROKER_URL`` prints
    the one-line error and exits before it does anything else."""
    if not BROKER_URL.read():
        print(f"error: {MISSING_BROKER_URL}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_NO_BROKER)
