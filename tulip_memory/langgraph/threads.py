"""Where a LangGraph thread's namespaces live in the delta storage, and its two indexes.

Pure functions, no I/O. ``(thread_id, checkpoint_ns)`` is the delta thread
:func:`delta_thread` names (``lg:`` and the pair as JSON: injective, and never a
thread id the project's own threads are given by this module). Two kinds of small
objects, beside the delta layout's ``heads/`` and ``log/`` and scoped to a tenant the
same way (:func:`~tulip_memory.delta.keys.scoped_key`), find the delta threads an
operation needs without listing the whole storage:

``lgns/<hh>/<thread segment>/<ns digest>``
    one per namespace of a thread, holding the namespace (``delete_thread``,
    ``copy_thread`` and ``prune`` reach every namespace, subgraphs' too);
``lgruns/<run segment>/<delta thread digest>``
    one per run and namespace it saved checkpoints in, holding the delta thread id
    (``delete_for_runs`` reaches only those).

Each is written before the checkpoint that needs it (a crash leaves a marker without
its checkpoint, which readers skip, never a checkpoint no marker finds).
"""

from __future__ import annotations

import hashlib
import json

from tulip_memory.delta.keys import segment, spread

PREFIX = "lg:"
NAMESPACES = "lgns/"
RUNS = "lgruns/"


def delta_thread(thread_id: str, checkpoint_ns: str) -> str:
    """The delta thread holding one namespace of a LangGraph thread."""
    return PREFIX + json.dumps([thread_id, checkpoint_ns], ensure_ascii=False)


def parse_delta_thread(delta_id: str) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of a delta thread :func:`delta_thread` named."""
    if not delta_id.startswith(PREFIX):
        return None
    try:
        pair = json.loads(delta_id[len(PREFIX) :])
    except ValueError:
        return None
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
        return None
    return pair[0], pair[1]


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def namespaces_prefix(thread_id: str) -> str:
    return f"{NAMESPACES}{spread(thread_id)}/{segment(thread_id)}/"


def namespace_key(thread_id: str, checkpoint_ns: str) -> str:
    return namespaces_prefix(thread_id) + _digest(checkpoint_ns)


def runs_prefix(run_id: str) -> str:
    return f"{RUNS}{segment(run_id)}/"


def run_key(run_id: str, delta_id: str) -> str:
    return runs_prefix(run_id) + _digest(delta_id)
