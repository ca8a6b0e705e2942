"""Every Redis key prefix the project owns, in one place.

Keys are built as ``<PREFIX><name>``. Keep this a flat module of string constants so
that anyone can see at a glance which parts of a shared Redis belong to us (and that
no two features collide). Keys owned by kombu/Celery are not listed here: they are
read from the transport at run time.
"""

from __future__ import annotations

#: Counting semaphores (one sorted set of leases per semaphore name).
SEMAPHORE_PREFIX = "tulip:sem:"
