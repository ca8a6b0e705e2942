"""Refuse to start on the deployment files' placeholders, and on URLs a secret broke.

``.env.example`` ships ``change-me`` for every secret; compose only checks that a value
is set, so a copy left as it is would run with passwords anyone can read in the
repository. And compose builds URLs from the secrets (``redis://:${REDIS_PASSWORD}@...``):
a secret with ``/``, ``@`` or ``:`` in it turns the URL into another one (redis-py:
``Port could not be cast to integer``). Every ``tulip-memory`` command checks its own
environment first and names what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

PLACEHOLDER = "change-me"
#: Settings outside ``TULIP_*`` that carry a deployment's secrets into our processes.
OTHERS = ("AWS_SECRET_ACCESS_KEY", "FLOWER_BASIC_AUTH")
HINT = "`openssl rand -hex 24` makes a secret that URLs carry as it is"


def deployment_problems(environ: Mapping[str, str]) -> list[str]:
    """One line per setting of ``environ`` that holds a placeholder or is a URL that
    does not parse; never a value."""
    problems: list[str] = []
    for name in sorted(environ):
        if not (name.startswith("TULIP_") or name in OTHERS):
            continue
        value = environ[name]
        if PLACEHOLDER in value.lower():
            problems.append(
                f"{name} holds the placeholder {PLACEHOLDER!r} of .env.example: replace "
                f"every {PLACEHOLDER} in .env with a secret ({HINT})"
            )
        elif name.endswith("_URL") and "://" in value and not _parses(value):
            problems.append(
                f"{name} is not a valid URL: a password holding '/', '@', ':' or '#' must "
                f"be percent-encoded ({HINT})"
            )
    return problems


def _parses(url: str) -> bool:
    """Whether every URL of ``url`` (kombu joins several with ``;``) has a host part
    that parses, port included."""
    for part in url.split(";"):
        try:
            _ = urlsplit(part).port
        except ValueError:
            return False
    return True
