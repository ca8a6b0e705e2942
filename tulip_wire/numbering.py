"""The Lua that numbers an event, shared by both publish paths.

Each ordering key (a namespace's, a thread's) has a counter in Redis,
:func:`tulip_wire.topology.seq_key`, that expires once its key has been idle for the
producer's ``TULIP_SEQ_IDLE_TTL``: Redis holds state for the keys in use, not for every
user there ever was. A number is the larger of the last + 1 and the Redis server's
clock in microseconds (``lua/next_seq.lua``), so the counter that comes back after an
expiry starts above every number given out before it, and a worker's sequence fence
(an older event never overwrites a newer row) holds across the expiry with no other
durable state. The publish quota (``lua/quota.lua``) is checked in the same script,
before anything is written.
"""

from __future__ import annotations

from tulip_wire.scripts import lua

#: How long an idle key's counter is kept: its next event is numbered from the clock.
DEFAULT_SEQ_IDLE_TTL = 7 * 24 * 3600.0
#: The functions every numbering script starts with: ``next_seq``, ``over_quota``.
FUNCTIONS = lua(__file__, "next_seq.lua") + lua(__file__, "quota.lua")
#: The general path's script: number, mark published, read the layout (one round trip).
NUMBER_EVENT = FUNCTIONS + lua(__file__, "number_event.lua")
#: What a numbering script returns in place of a number when the tenant is over quota.
OVER_QUOTA = -2
