"""What a command prints when a service does not answer: the variable its DSN came
from, where it points (credentials stripped), and why."""

from __future__ import annotations

import os

from tulip_memory.credentials import redact_url
from tulip_memory.errors import DatabaseUnreachable

#: The DSN settings of ours, in the order a command's error names one holding the DSN.
DSN_SETTINGS = ("TULIP_DATABASE_URL", "TULIP_DATABASE_ADMIN_URL")


def named(error: DatabaseUnreachable) -> DatabaseUnreachable:
    """``error`` naming the variable its DSN came from, when one of ours holds it."""
    if error.setting is not None:
        return error
    for setting in DSN_SETTINGS:
        value = os.environ.get(setting)
        if value and redact_url(value) == error.where:
            return error.named(setting)
    return error
