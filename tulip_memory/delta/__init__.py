"""Delta checkpointing (``tulip.memory.delta``): per-thread state stored as what changed.

:class:`DeltaCheckpointer` is the seed's checkpointer; :class:`DeltaStorage` the storage
contract, with :class:`FileDeltaStorage`, :class:`S3DeltaStorage` (any S3 API) and
:class:`InMemoryObjectStorage` as backends of the layout below (each is
:class:`ObjectStoreDeltaStorage` on one :mod:`tulip_memory.objects` store), and the seed's
:class:`InMemoryDeltaStorage`, which keeps the records it is given (a storage written to
the seed's ``store`` / ``retrieve`` / ``list_checkpoints`` / ``delete`` works the same
way, see :mod:`tulip_memory.delta.records`).

Layout
------
Per thread (keys in :mod:`~tulip_memory.delta.keys`; ``<t>`` is ``<hash2>/<escaped id>``):

``heads/<t>``
    The *head*, rewritten in place by every save: the manifest (checkpoint ids,
    history objects, the newest deltas not yet merged) and the latest state in
    *segments* (runs of list items, each compressed on its own, see
    :mod:`~tulip_memory.delta.segments`), so a save that appends messages reuses
    the sealed segments and compresses only the open one. Loading the latest
    checkpoint is this one GET. Heads written before segments (one compressed state
    section) still load; the next save rewrites them in segments.
``log/<t>/<level>/<first>-<last>-<nonce>``
    Immutable *history objects*: each holds the entries (checkpoints) ``first..last``,
    and each entry stores only what changed since the previous one (appended,
    removed or edited messages, changed fields, as a :mod:`~tulip_memory.delta.diff`
    patch) or, at the start of an *epoch*, the full state.

History is merged like a counter in base ``D + 1`` (``D = max_chain_depth``): the
newest deltas wait in the head until there are ``D + 1`` of them, which become one
level-1 object; ``D + 1`` level-``k`` objects become one level-``k+1`` object, read
and rewritten by the save that completes them, the inputs then deleted. Each change
is therefore stored once at rest (plus the head), and an epoch of ``n`` entries is
never more than ``D`` objects per level over ``L = floor(log_{D+1} n)`` levels.

A save writes a full snapshot, starting a new epoch, for the first save of a thread,
when a delta would not be smaller than the state, when the epoch's history would
exceed 4x the state (threads that are truncated or summarised), when the epoch is
older than ``max_epoch_age``, and when what a delta or a merge builds on cannot be
read (a corrupt object only fails the loads that need it, never a later save).

Bounds (per load; GETs inside one round trip run concurrently)
--------------------------------------------------------------
- latest checkpoint: 1 round trip, 1 GET (the head);
- any older checkpoint: 2 round trips: the head, then at most
  ``D * floor(log_{D+1} n) + 1`` GETs for an epoch of ``n`` entries (16 for
  ``D = 5`` up to n = 1295), replayed from the epoch's snapshot (or from a state an
  earlier replay of the same cached entries kept:
  :func:`~tulip_memory.delta.layout.rebuild`) and checked against the digest saved
  with the checkpoint. A load that races a merge deleting what it reads re-reads the
  head: 2 more round trips, at most twice. The objects read are kept decoded
  (:mod:`~tulip_memory.delta.history`: immutable, so a name the manifest still lists
  at the same size needs no check), and an old checkpoint whose objects
  are all kept loads in 1 round trip, the head's GET;
- a save: 2 round trips (GET head, PUT head); onto the latest state this
  checkpointer saved (kept in a bounded cache, :mod:`~tulip_memory.delta.cache`)
  an append costs one encode of the state, a ``memcmp`` and ``==`` against the old
  one, and compressing the change: no decode, no second encode, no recompression
  of the thread. Every ``(D+1)``-th save first PUTs the
  merged object (3); when a higher level completes it first GETs its inputs (4);
  retired objects are then deleted.

``max_chain_depth`` trades reads against rewriting, not storage: at rest each change
is stored once whatever ``D`` (plus the head, which holds at most ``D`` deltas).
Larger ``D`` means fewer levels, so each change is rewritten fewer times
(``floor(log_{D+1} n)``), but up to ``D`` objects per level for an old checkpoint;
smaller ``D`` means more levels and more rewriting but fewer GETs (``D = 1``: at most
``floor(log2 n) + 1``). ``D = 0`` stores every save as a full snapshot (the
full-state-every-save cost; any checkpoint is one object).

Retention
---------
Retention is the bucket's lifecycle policy, not tulip's: expire ``heads/`` after R
days (a head is rewritten by every save, so only threads idle for R days go) and
``log/`` and ``names/`` after R days too. With ``max_epoch_age`` shorter than R, a
save never needs an object older than ``max_epoch_age`` (an older epoch is restarted
with a snapshot), the latest checkpoint loads as long as its head exists, and any
checkpoint stays loadable for at least ``R - max_epoch_age`` days. On a versioned
bucket also expire noncurrent versions, or every save keeps an old head.
"""

from tulip_memory.delta.checkpointer import DeltaCheckpointer
from tulip_memory.delta.errors import (
    CorruptCheckpointError,
    DeltaError,
    DeltaStorageError,
    InvalidCheckpointIdError,
    InvalidThreadIdError,
    StateNotSerializableError,
)
from tulip_memory.delta.layout import Policy
from tulip_memory.delta.memory import InMemoryDeltaStorage
from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.delta.objects import (
    FileDeltaStorage,
    InMemoryObjectStorage,
    ObjectStoreDeltaStorage,
    S3DeltaStorage,
)
from tulip_memory.delta.storage import DeltaStorage, ThreadPage
from tulip_memory.objects import ObjectInfo, ObjectPage

__all__ = [
    "CheckpointMetadata",
    "CorruptCheckpointError",
    "DeltaCheckpoint",
    "DeltaCheckpointer",
    "DeltaError",
    "DeltaStorage",
    "DeltaStorageError",
    "FileDeltaStorage",
    "InMemoryDeltaStorage",
    "InMemoryObjectStorage",
    "InvalidCheckpointIdError",
    "InvalidThreadIdError",
    "ObjectInfo",
    "ObjectPage",
    "ObjectStoreDeltaStorage",
    "Policy",
    "S3DeltaStorage",
    "StateNotSerializableError",
    "ThreadPage",
]
