"""A LangGraph thread namespace as one delta-checkpointed document: pure functions, no I/O.

One ``(thread_id, checkpoint_ns)`` of LangGraph is one thread of
:mod:`tulip_memory.delta`, whose state (this *document*) is always:

``id``, ``checkpoint``
    The id of the newest checkpoint, and that checkpoint without its values (ts,
    versions, versions seen), as JSON when JSON carries it exactly, else through the
    saver's serializer.
``values``
    Its channel values other than lists, each ``[type, bytes]`` from the serializer.
``list.<channel>``
    A channel whose value is a list (``add_messages``' messages), item by item, each
    ``[type, bytes]``: a step that appends messages appends items, so the delta layout
    stores each message once (a list the step rewrote is stored as its patch).
``index``
    Every checkpoint of the namespace, in the order saved: ``[id, parent id,
    metadata]``; appended to by each put.
``writes``
    Every pending write, of any checkpoint, in the order received: ``[checkpoint id,
    task id, idx, channel, type, bytes, task path]``; appended to by each put_writes.

Bytes travel as Latin-1 text (one character per byte): JSON then escapes only the
control bytes, and the text of a message stays text, which compresses as well as the
serializer's own output (base64 would cost a third more before compression, and more
after). A checkpoint's values are those of the entry saved by its put; its metadata,
parent and pending writes are read from the newest document's index and writes, so
writes that arrive after a later checkpoint was saved (LangGraph saves them in the
background) still reach theirs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

FORMAT = 1
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
    if "json" in stored:
        return stored["json"]
    return unpack(serde, stored["typed"])


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
    skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
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
    if any(item[0] == put.id for item in index):  # saved again under its id: replaced
        doc[INDEX] = [put.entry if item[0] == put.id else item for item in index]
    else:
        doc[INDEX], counts[INDEX] = [*index, put.entry], len(index)
    writes: list[Any] = base.get(WRITES) or []
    doc[WRITES], counts[WRITES] = list(writes), len(writes)
    return doc, counts


def prepare_writes(
    serde: SerializerProtocol,
    checkpoint_id: str,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[list[Any]]:
    """One task's writes packed, each known by ``(checkpoint, task, idx)`` (a special
    channel's idx is its own, negative: see ``WRITES_IDX_MAP``)."""
    return [
        [checkpoint_id, task_id, WRITES_IDX_MAP.get(ch, i), ch, *pack(serde, v), task_path]
        for i, (ch, v) in enumerate(writes)
    ]


def with_writes(
    current: Document | None, items: Sequence[list[Any]]
) -> tuple[Document, Counts] | None:
    """``current`` with one task's writes added (None: all of them are there
    already): a regular write is kept as first received, a special one (error,
    interrupt...) replaced, as LangGraph's savers do."""
    base = current or {"format": FORMAT}
    old: list[Any] = base.get(WRITES) or []
    cids = {item[0] for item in items}
    mine = {(w[0], w[1], w[2]): i for i, w in enumerate(old) if w[0] in cids}
    added: list[Any] = []
    replaced: dict[int, list[Any]] = {}
    for item in items:
        at = mine.get((item[0], item[1], item[2]))
        if at is None:
            added.append(item)
        elif item[2] < 0 and old[at] != item:
            replaced[at] = item
    if not added and not replaced:
        return None
    doc = {k: v for k, v in base.items() if k != WRITES}
    counts = {k: len(v) for k, v in doc.items() if k.startswith(LIST) or k == INDEX}
    if replaced:
        doc[WRITES] = [replaced.get(i, w) for i, w in enumerate(old)] + added
        return doc, counts
    doc[WRITES], counts[WRITES] = [*old, *added], len(old)
    return doc, counts


def without(document: Document, dropped: set[str]) -> Document:
    """``document`` without the index entries and writes of the ``dropped`` ids."""
    doc = dict(document)
    doc[INDEX] = [e for e in document.get(INDEX) or () if e[0] not in dropped]
    doc[WRITES] = [w for w in document.get(WRITES) or () if w[0] not in dropped]
    return doc


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
    for entry in reversed(document.get(INDEX) or ()):
        if entry[0] == cid:
            return list(entry)
    return None


def read_checkpoint(serde: SerializerProtocol, document: Document) -> dict[str, Any]:
    """The checkpoint a put's document holds, values included."""
    checkpoint = dict(from_json(serde, document[CHECKPOINT]))
    values = {ch: unpack(serde, v) for ch, v in (document.get(VALUES) or {}).items()}
    for key, items in document.items():
        if key.startswith(LIST):
            values[key[len(LIST) :]] = [unpack(serde, item) for item in items]
    checkpoint["channel_values"] = values
    return checkpoint


def read_metadata(serde: SerializerProtocol, entry: Sequence[Any]) -> dict[str, Any]:
    return dict(from_json(serde, entry[2]))


def read_writes(
    serde: SerializerProtocol, document: Document, cid: str
) -> list[tuple[str, str, Any]]:
    """The pending writes of checkpoint ``cid``, in ``writes_sort_key`` order."""
    mine = [w for w in document.get(WRITES) or () if w[0] == cid]
    mine.sort(key=lambda w: writes_sort_key(w[6], w[1], w[2]))
    return [(w[1], w[3], unpack(serde, w[4:6])) for w in mine]


def run_ids(serde: SerializerProtocol, document: Document) -> set[str]:
    """The run ids of the document's checkpoints."""
    found = set()
    for entry in document.get(INDEX) or ():
        run = read_metadata(serde, entry).get("run_id")
        if isinstance(run, str):
            found.add(run)
    return found
