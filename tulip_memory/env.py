"""Environment variables, each declared once with its parser and default.

Every ``TULIP_*`` variable is one :class:`Var`, declared once in the room that owns it:
the library's at the end of this module, the ones producers and workers share in
:mod:`tulip_wire.env`, each role's own in its ``settings`` module. A role
builds its typed settings from them once per process, so a variable has one parser,
one default and one error, wherever it is used. An empty value counts as unset. A
malformed one raises a one-line ``ValueError`` naming the variable; a secret's value
is never repeated in it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
Env = Mapping[str, str]


def environ(env: Env | None = None) -> Env:
    """``env``, else the process environment."""
    return os.environ if env is None else env


@dataclass(frozen=True)
class Var(Generic[T]):
    """One variable: ``parse`` turns a non-empty value into ``T`` (or raises a
    ``ValueError`` saying what it must be); unset or empty is ``default``."""

    name: str
    default: T
    parse: Callable[[str], T]
    secret: bool = False

    def read(self, env: Env | None = None) -> T:
        raw = environ(env).get(self.name, "")
        if not raw.strip():
            return self.default
        try:
            return self.parse(raw)
        except ValueError as e:
            got = "" if self.secret else f", got {raw!r}"
            raise ValueError(f"{self.name} {e}{got}") from None


def text(raw: str) -> str:
    """The value as it is (a key or password keeps its spaces)."""
    return raw


def stripped(raw: str) -> str:
    return raw.strip()


def integer(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("must be an integer") from None


def positive(raw: str) -> int:
    value = integer(raw)
    if value < 1:
        raise ValueError("must be an integer >= 1")
    return value


def niceness(raw: str) -> int:
    """A process's niceness: 0 (the default priority) to 19 (the lowest)."""
    value = integer(raw)
    if not 0 <= value <= 19:
        raise ValueError("must be an integer from 0 (the default priority) to 19 (the lowest)")
    return value


def seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a finite number of seconds > 0")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return parse


def text_var(name: str, *, secret: bool = False) -> Var[str | None]:
    """A string variable, ``None`` when unset."""
    return Var[str | None](name, None, text, secret)


# The library's own variables (its stores and backends read them).
#: The application role's DSN (required where a store is built).
DATABASE_URL = Var("TULIP_DATABASE_URL", "", stripped, secret=True)
#: The administrator's DSN (migrations, owner-only reindex steps, ``provision``).
DATABASE_ADMIN_URL = text_var("TULIP_DATABASE_ADMIN_URL", secret=True)
MEMORY_TABLE = Var("TULIP_MEMORY_TABLE", "tulip_memories", text)
#: Where thread checkpoints are stored (``s3://``, ``file://``, ``memory://``).
CHECKPOINT_URL = Var("TULIP_CHECKPOINT_URL", "", text)
#: Any S3 API (MinIO, moto); unset is AWS.
S3_ENDPOINT_URL = text_var("TULIP_S3_ENDPOINT_URL")
#: The embedder (:func:`tulip_memory.embeddings.embedder_from_config`); unset is hashing.
EMBED_MODEL = text_var("TULIP_EMBED_MODEL")
EMBED_DIM = Var[int | None]("TULIP_EMBED_DIM", None, integer)
EMBED_API_BASE = text_var("TULIP_EMBED_API_BASE")
#: Threads a local (in-process) model computes with, process-wide; unset is torch's own
#: choice, every core, which processes sharing a host's cores must divide between them.
EMBED_THREADS = Var[int | None]("TULIP_EMBED_THREADS", None, positive)
#: Other embedders a table's slot registry may name (:mod:`tulip_memory.embeddings.allowlist`).
EMBED_ALLOWED = Var("TULIP_EMBED_ALLOWED", "", text)
