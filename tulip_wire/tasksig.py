"""Signed unordered tasks: summarize and reindex jobs carry a ``sig`` keyword argument.

Any client of the broker can send ``tulip.thread.summarize`` or ``tulip.memory.reindex``
with any arguments. With ``TULIP_EVENT_SIGNING_KEY`` set, the sender (the checkpoint
worker, ``tulip-memory reindex``) signs the task's name and positional arguments (HMAC
in the task domain of :mod:`tulip_wire.signing`: a task signature never passes for an
event's or a pending entry's), and the worker refuses a task that is unsigned or not
signed by a key it holds before it acts on any argument.

A signature binds the arguments, not the delivery: a captured task sent again verifies
again. Each kind is safe to run twice (see the task bodies): a summarize job names the
one pending job of its thread by a token, and a reindex batch of a range already done
is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tulip_wire.signing import ENV_VAR, TASK_DOMAIN, Signer

#: The keyword argument a signed task carries its signature in.
SIG_KWARG = "sig"


def _message(name: str, args: Sequence[Any]) -> bytes | None:
    try:
        text = json.dumps([name, *args], sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None
    return text.encode("ascii")


def task_kwargs(signer: Signer | None, name: str, args: Sequence[Any]) -> dict[str, str]:
    """The keyword arguments that sign task ``name`` with ``args`` (none without a signer)."""
    if signer is None:
        return {}
    message = _message(name, args)
    assert message is not None, "a task's arguments are JSON"
    return {SIG_KWARG: signer.tag(TASK_DOMAIN, message)}


def task_refusal(signer: Signer | None, name: str, args: Sequence[Any], sig: object) -> str | None:
    """Why a worker with ``signer`` refuses task ``name`` with ``args`` and ``sig``, or
    ``None`` to run it (always ``None`` without a signer). Names no argument."""
    if signer is None:
        return None
    if sig is None:
        return f"ForgedTask: unsigned {name} task refused ({ENV_VAR} is set on this worker)"
    message = _message(name, args)
    if message is None or not signer.checks(TASK_DOMAIN, message, sig):
        return (
            f"ForgedTask: bad signature on a {name} task: not signed with this deployment's "
            f"{ENV_VAR}, or changed after signing"
        )
    return None
