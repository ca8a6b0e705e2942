"""The variables producers and workers share, each declared once (see
:mod:`tulip_memory.env`), and the rules that combine them."""

from __future__ import annotations

from tulip_memory.env import Env, Var, environ, one_of, positive, text, text_var
from tulip_wire.endpoints import REDIS_SCHEMES, scheme_of
from tulip_wire.events import DEFAULT_MAX_EVENT_BYTES

DEFAULT_SPOOL_DIR = "./.tulip-spool"

#: No default here: each side says what it does without one.
BROKER_URL = Var("TULIP_BROKER_URL", "", text, secret=True)
REDIS_URL = Var("TULIP_REDIS_URL", "", text, secret=True)
EXTRACT_SHARDS = Var("TULIP_EXTRACT_SHARDS", 4, positive)
CHECKPOINT_SHARDS = Var("TULIP_CHECKPOINT_SHARDS", 4, positive)
#: Inline envelope limit: the producer claim-checks above it, a worker refuses above it.
MAX_EVENT_BYTES = Var("TULIP_MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES, positive)
SPOOL_DIR = Var("TULIP_SPOOL_DIR", DEFAULT_SPOOL_DIR, text)
CLAIM_CHECK_URL = text_var("TULIP_CLAIM_CHECK_URL")
EVENT_SIGNING_KEY = text_var("TULIP_EVENT_SIGNING_KEY", secret=True)
#: Longer than any task may run, so Redis never redelivers a message still in work.
VISIBILITY_TIMEOUT = Var("TULIP_VISIBILITY_TIMEOUT", 2 * 60 * 60, positive)
TASK_TIME_LIMIT = Var("TULIP_TASK_TIME_LIMIT", 30 * 60, positive)
LOG_FORMAT = Var("TULIP_LOG_FORMAT", "text", one_of("text", "json"))


#: What every role says when ``TULIP_BROKER_URL`` is unset: none guesses a broker.
EXAMPLE_BROKER_URL = "redis://127.0.0.1:6379/0"
MISSING_BROKER_URL = (
    "TULIP_BROKER_URL is not set: set it to the broker the workers consume "
    f"(e.g. {EXAMPLE_BROKER_URL})"
)


def broker_url(env: Env | None = None) -> str:
    """``TULIP_BROKER_URL``; unset, a ``ValueError`` saying so (:data:`MISSING_BROKER_URL`)."""
    url = BROKER_URL.read(environ(env))
    if not url:
        raise ValueError(MISSING_BROKER_URL)
    return url


def redis_url(env: Env | None = None) -> str | None:
    """``TULIP_REDIS_URL``, else a Redis ``TULIP_BROKER_URL``, else ``None``."""
    e = environ(env)
    url = REDIS_URL.read(e) or BROKER_URL.read(e)
    return url if scheme_of(url) in REDIS_SCHEMES else None
