"""A LangGraph thread namespace as one delta-checkpointed document: pure functions, no I/O.

One ``(thread_id, checkpoint_ns)`` of LangGraph is one thread of
:mod:`tulip_memory.delta`, whose state (this *document*) is always:

``id``, ``checkpoint``
    The id of the newest checkpoint, and that checkpoint without its id and values (ts,
    versions, versions seen), as JSON when JSON carries it exactly, else through the
    saver's serializer.
``values``
    Its channel values other than lists, each ``[type, bytes]`` from the serializer.
``list.<channel>``
    A channel whose value is a list (``add_messages``' messages), item by item, each
    ``[type, bytes]``: a step that appends messages appends items, so the delta layout
    stores each message once (a list the step rewrote is stored as its patch).
``index``
    Every checkpoint of the namespace, in the order saved: ``[id, parent, metadata]``
    (``parent`` 0 when it is the entry before: the usual case costs no id); appended
    to by each put.
``writes``
    ``{"groups": [...]}``: the pending writes of the newest checkpoint and of the one
    before it (LangGraph saves a step's writes in the background: they can land after
    the next checkpoint), one group per put_writes, ``[checkpoint id, task id, task
    path, [[idx, channel, type, bytes], ...]]``, plus any that arrived later still
    (marked ``late``, kept). A put drops the groups of older checkpoints: the head
    carries two steps' writes, not the thread's, and a checkpoint's writes are read
    from the last entry saved before the put two checkpoints after it
    (:func:`writes_entry`).

Bytes travel as Latin-1 text (one character per byte): JSON then escapes only the
control bytes, and the text of a message stays text, which compresses as well as the
serializer's own output (base64 would cost a third more before compression, and more
after). A checkpoint's values are those of the entry saved by its put; its metadata and
parent are read from the newest document's index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

FORMAT = 1
LATE = "late"
CHECKPOINT = "checkpoint"
VALUES = "values"
LIST = "list."
INDEX = "index"
WRITES = "writes"

Document = dict[str, Any]
Counts = dict[str, int]


def pack(serde: SerializerProtocol, value: Any) -> list[str]:
    """``value`` through the serializer, as ``[type, Latin-1 text of the bytes]``."""
    kind, data = serde.dumps_typed(value)
    return [kind, bytes(data).decode("latin-1")]


def unpack(serde: SerializerProtocol, packed: Sequence[str]) -> Any:
    kind, text = packed
    return serde.loads_typed((kind, text.encode("latin-1")))


def to_json(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """``{"json": value}`` when JSON carries ``value`` exactly, else the serializer's
    ``{"typed": [type, text]}``: plain data stays readable and diffs field by field."""
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError):
        return {"typed": pack(serde, value)}
    if _same(json.loads(text), value):
        return {"json": value}
    return {"typed": pack(serde, value)}


def from_json(serde: SerializerProtocol, stored: Mapping[str, Any]) -> Any:
    """The value :func:`to_json` stored, the caller's own (a stored document may be a
    cached one, which LangGraph changing a checkpoint's versions in place must not
    reach)."""
    if "json" in stored:
        return _copied(stored["json"])
    return unpack(serde, stored["typed"])


def _copied(value: Any) -> Any:
    """A copy of parsed JSON sharing no dict or list with it."""
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    return value


def _same(parsed: Any, value: Any) -> bool:
    """Equal and of the same JSON types all the way down (``1 == 1.0 == True``)."""
    if type(parsed) is not type(value):
        return False
    if isinstance(value, dict):
        return parsed.keys() == value.keys() and all(_same(parsed[k], value[k]) for k in value)
    if isinstance(value, list):
        return len(parsed) == len(value) and all(map(_same, parsed, value))
    return bool(parsed == value)


# -- building documents --------------------------------------------------------------


@dataclass(frozen=True)
class PreparedCheckpoint:
    """What a put stores, packed (outside the thread's write lock)."""

    id: str
    skeleton: dict[str, Any]
    values: dict[str, list[str]]
    lists: dict[str, list[Any]]
    entry: list[Any]


def prepare_checkpoint(
    serde: SerializerProtocol,
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any],
    parent: str | None,
) -> PreparedCheckpoint:
    """A put's checkpoint packed: a value is stored under its channel's version (as
    every saver does: one that has none is not stored)."""
    versions = checkpoint.get("channel_versions") or {}
    skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
    values: dict[str, list[str]] = {}
    lists: dict[str, list[Any]] = {}
    for channel, value in (checkpoint.get("channel_values") or {}).items():
        if channel not in versions:
            continue
        if type(value) is list:
            lists[LIST + channel] = [pack(serde, v) for v in value]
        else:
            values[channel] = pack(serde, value)
    cid = str(checkpoint["id"])
    entry = [cid, parent, to_json(serde, dict(metadata))]
    return PreparedCheckpoint(cid, to_json(serde, skeleton), values, lists, entry)


def with_checkpoint(current: Document | None, put: PreparedCheckpoint) -> tuple[Document, Counts]:
    """``current`` with ``put``'s checkpoint as its newest, and how many first items
    of each list are ``current``'s own objects (a put that appended messages)."""
    base = current or {}
    doc: Document = {"format": FORMAT, "id": put.id, CHECKPOINT: put.skeleton, VALUES: put.values}
    counts: Counts = {}
    for key, items in put.lists.items():
        doc[key], counts[key] = _reuse(base.get(key), items)
    index: list[Any] = base.get(INDEX) or []
    at = next((i for i, item in enumerate(index) if item[0] == put.id), None)
    if at is not None:  # saved again under its id: replaced
        entry = _elided(put.entry, index[at - 1][0] if at else None)
        doc[INDEX] = [entry if i == at else item for i, item in enumerate(index)]
    else:
        entry = _elided(put.entry, index[-1][0] if index else None)
        doc[INDEX], counts[INDEX] = [*index, entry], len(index)
    ids = [e[0] for e in doc[INDEX]]
    window = set(ids[max(0, ids.index(put.id) - 1) : ids.index(put.id) + 1])
    doc[WRITES] = {"groups": [g for g in _groups(base) if g[0] in window or _late(g)]}
    return doc, counts


def _elided(entry: list[Any], before: str | None) -> list[Any]:
    """An index entry whose parent is the entry before it, with that parent as 0."""
    return [entry[0], 0, entry[2]] if before is not None and entry[1] == before else entry


def prepare_writes(
    serde: SerializerProtocol,
    checkpoint_id: str,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[Any]:
    """One task's writes packed as one group, each write known by ``(checkpoint, task,
    idx)`` (a special channel's idx is its own, negative: see ``WRITES_IDX_MAP``)."""
    packed = [[WRITES_IDX_MAP.get(ch, i), ch, *pack(serde, v)] for i, (ch, v) in enumerate(writes)]
    return [checkpoint_id, task_id, task_path, packed]


def with_writes(current: Document | None, group: list[Any]) -> tuple[Document, Counts] | None:
    """``current`` with one task's writes added (None: all of them are there
    already): a regular write is kept as first received, a special one (error,
    interrupt...) replaced, as LangGraph's savers do."""
    base = current or {"format": FORMAT}
    old = _groups(base)
    cid, task = group[0], group[1]
    seen = {
        w[0]: (i, j)
        for i, g in enumerate(old)
        if g[0] == cid and g[1] == task
        for j, w in enumerate(g[3])
    }
    added = [w for w in group[3] if w[0] not in seen]
    replaced = [w for w in group[3] if w[0] in seen and w[0] < 0]
    replaced = [w for w in replaced if old[seen[w[0]][0]][3][seen[w[0]][1]] != w]
    if not added and not replaced:
        return None
    doc = {k: v for k, v in base.items() if k != WRITES}
    counts = {k: len(v) for k, v in doc.items() if k.startswith(LIST) or k == INDEX}
    flag = [LATE] if _is_late(base, cid) else []
    writes = [*old, [*group[:3], added, *flag]] if added else list(old)
    for w in replaced:
        i, j = seen[w[0]]
        changed = [w if k == j else x for k, x in enumerate(writes[i][3])]
        writes[i] = [*writes[i][:3], changed, *writes[i][4:]]
    doc[WRITES] = {"groups": writes}
    return doc, counts


def groups(document: Document) -> list[Any]:
    """The document's groups of pending writes."""
    return _groups(document)


def _groups(document: Document) -> list[Any]:
    return list((document.get(WRITES) or {}).get("groups") or ())


def _late(group: Sequence[Any]) -> bool:
    return len(group) > 4 and group[4] == LATE


def _is_late(document: Document, cid: str) -> bool:
    """Whether writes of ``cid`` arrive after the put two checkpoints after it (the
    next put would drop them from the head: they are kept for good instead)."""
    ids = [e[0] for e in document.get(INDEX) or ()]
    return cid in ids and cid not in ids[-2:]


def without(document: Document, dropped: set[str]) -> Document:
    """``document`` without the index entries and writes of the ``dropped`` ids (a
    kept checkpoint whose parent is dropped keeps none, as LangGraph's savers do)."""
    doc = dict(document)
    kept = [
        (e[0], None if parent in dropped else parent)
        for e, parent in index_parents(document)
        if e[0] not in dropped
    ]
    entries = {e[0]: e for e in document.get(INDEX) or ()}
    index: list[Any] = []
    for cid, parent in kept:
        index.append(_elided([cid, parent, entries[cid][2]], index[-1][0] if index else None))
    doc[INDEX] = index
    doc[WRITES] = {"groups": [g for g in _groups(document) if g[0] not in dropped]}
    return doc


def index_parents(document: Document) -> list[tuple[list[Any], str | None]]:
    """The index entries with their parents' ids (0 read as the entry before)."""
    out: list[tuple[list[Any], str | None]] = []
    before: str | None = None
    for entry in document.get(INDEX) or ():
        out.append((entry, before if entry[1] == 0 else entry[1]))
        before = entry[0]
    return out


def _reuse(old: list[Any] | None, new: list[Any]) -> tuple[list[Any], int]:
    """``new`` with its first items that equal ``old``'s replaced by ``old``'s own
    objects, and how many those are (all of ``old``, or 0: only then may the delta
    layout skip them)."""
    if not old or len(new) < len(old) or new[: len(old)] != old:
        return new, 0
    return [*old, *new[len(old) :]], len(old)


# -- reading documents ---------------------------------------------------------------


def checkpoint_id(document: Document) -> str | None:
    """The id of the checkpoint the document holds (None: only writes so far)."""
    cid = document.get("id")
    return cid if isinstance(cid, str) else None


def index_entry(document: Document, cid: str) -> list[Any] | None:
    """``[id, parent id, metadata]`` of checkpoint ``cid``, None when not indexed."""
    index = document.get(INDEX) or ()
    for i in range(len(index) - 1, -1, -1):
        entry = index[i]
        if entry[0] == cid:
            parent = (index[i - 1][0] if i else None) if entry[1] == 0 else entry[1]
            return [entry[0], parent, entry[2]]
    return None


def read_checkpoint(serde: SerializerProtocol, document: Document) -> dict[str, Any]:
    """The checkpoint a put's document holds, values included."""
    checkpoint = dict(from_json(serde, document[CHECKPOINT]))
    checkpoint["id"] = document["id"]
    values = {ch: unpack(serde, v) for ch, v in (document.get(VALUES) or {}).items()}
    for key, items in document.items():
        if key.startswith(LIST):
            values[key[len(LIST) :]] = [unpack(serde, item) for item in items]
    checkpoint["channel_values"] = values
    return checkpoint


def read_metadata(serde: SerializerProtocol, entry: Sequence[Any]) -> dict[str, Any]:
    return dict(from_json(serde, entry[2]))


def writes_entry(newest: Document, entries: Sequence[str], cid: str) -> str | None:
    """The delta entry whose document holds the writes of checkpoint ``cid``: the last
    one saved before the put of the checkpoint two after it; None: the newest."""
    ids = [e[0] for e in newest.get(INDEX) or ()]
    if cid not in ids or ids.index(cid) + 2 >= len(ids):
        return None
    target = ids[ids.index(cid) + 2]
    at = entries.index(target) if target in entries else 0
    return entries[at - 1] if at > 0 else None


def read_writes(
    serde: SerializerProtocol, holder: Document, newest: Document, cid: str
) -> list[tuple[str, str, Any]]:
    """The pending writes of checkpoint ``cid`` (in ``holder``, the document of its
    :func:`writes_entry`, and late ones in the newest), in ``writes_sort_key`` order."""
    groups = [g for g in _groups(holder) if g[0] == cid]
    if holder is not newest:
        groups += [g for g in _groups(newest) if g[0] == cid and _late(g)]
    found: dict[tuple[str, int], tuple[str, str, list[Any]]] = {}
    for g in groups:
        for w in g[3]:
            found.setdefault((g[1], w[0]), (g[1], g[2], w))
    mine = sorted(found.values(), key=lambda t: writes_sort_key(t[1], t[0], t[2][0]))
    return [(task, w[1], unpack(serde, w[2:4])) for task, _, w in mine]


def run_ids(serde: SerializerProtocol, document: Document) -> set[str]:
    """The run ids of the document's checkpoints."""
    found = set()
    for entry in document.get(INDEX) or ():
        run = read_metadata(serde, entry).get("run_id")
        if isinstance(run, str):
            found.add(run)
    return found
