"""Operator command settings: what ``tulip-memory provision``, ``dlq``, ``reindex`` and
``threads`` read from the environment, typed and checked once per command."""

from __future__ import annotations

from dataclasses import dataclass, field

from tulip_memory import env as lib
from tulip_memory.env import Env, environ, text_var
from tulip_wire import env as wire
from tulip_wire.signing import signer_of

#: The passwords ``provision`` gives the application role and ``tulip_ops``.
APP_PASSWORD = text_var("TULIP_APP_PASSWORD", secret=True)
OPS_PASSWORD = text_var("TULIP_OPS_PASSWORD", secret=True)


@dataclass(frozen=True, kw_only=True)
class OpsSettings:
    """``database_admin_url`` (``TULIP_DATABASE_ADMIN_URL``) and the passwords are
    ``None`` when unset; ``checkpoint_url`` is empty when unset; ``signing_key``
    (``TULIP_EVENT_SIGNING_KEY``) signs the tasks a command sends (reindex batches)."""

    database_admin_url: str | None = field(default=None, repr=False)
    app_password: str | None = field(default=None, repr=False)
    ops_password: str | None = field(default=None, repr=False)
    checkpoint_url: str = ""
    signing_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        signer_of(self.signing_key)  # a key too short fails here, naming the variable

    def admin_url(self, command: str) -> str:
        """The administrator DSN ``command`` needs, or a ``ValueError`` saying how to
        give it (in the environment: never on the command line, where every user of the
        host can read it in ``/proc``)."""
        if not self.database_admin_url:
            raise ValueError(
                f"TULIP_DATABASE_ADMIN_URL is not set: `{command}` needs an administrator "
                "DSN in the environment, e.g. `export TULIP_DATABASE_ADMIN_URL="
                "postgresql://postgres@db:5432/tulip` (for the dev stack: "
                "`source .tulip-dev/tulip.env`)"
            )
        return self.database_admin_url

    @classmethod
    def from_env(cls, env: Env | None = None) -> OpsSettings:
        e = environ(env)
        return cls(
            database_admin_url=lib.DATABASE_ADMIN_URL.read(e),
            app_password=APP_PASSWORD.read(e),
            ops_password=OPS_PASSWORD.read(e),
            checkpoint_url=lib.CHECKPOINT_URL.read(e),
            signing_key=wire.EVENT_SIGNING_KEY.read(e),
        )
