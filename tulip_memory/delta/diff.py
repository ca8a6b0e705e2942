"""Pure JSON diff and patch: what changed between two states, and applying it.

A *patch* turns one JSON value into another. It is itself JSON:

- ``["=", value]``: replace with ``value``.
- ``["{", {key: patch, ...}, [removed keys]]``: an object with some keys changed,
  added (as ``["=", v]``) or removed.
- ``["[", pieces]``: a list rebuilt from pieces, each either ``[i, j]`` (copy the old
  items ``old[i:j]``) or ``{"+": [items]}`` (new items).

Lists are matched item by item (common prefix and suffix, then
:class:`difflib.SequenceMatcher` on the rest), so appended, truncated, inserted,
removed and edited messages all cost only what changed. ``diff`` compares with
``==``, which treats ``1``, ``1.0`` and ``True`` alike; callers that need exact JSON
check the result (the checkpointer compares digests and falls back to a snapshot).
"""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from typing import Any

Patch = list[Any]


class PatchError(ValueError):
    """A patch that does not apply to the value it was given."""


def diff(old: Any, new: Any) -> Patch | None:
    """A patch from ``old`` to ``new``, or None when they are equal."""
    if old == new:
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_object(old, new)
    if isinstance(old, list) and isinstance(new, list):
        return _diff_list(old, new)
    return ["=", new]


def _diff_object(old: dict[str, Any], new: dict[str, Any]) -> Patch:
    changed: dict[str, Any] = {}
    for key, value in new.items():
        if key not in old:
            changed[key] = ["=", value]
            continue
        sub = diff(old[key], value)
        if sub is not None:
            changed[key] = sub
    removed = [key for key in old if key not in new]
    return ["{", changed, removed]


def _diff_list(old: list[Any], new: list[Any]) -> Patch:
    prefix = _common_prefix(old, new)
    suffix = _common_suffix(old[prefix:], new[prefix:])
    pieces: list[Any] = []
    if prefix:
        pieces.append([0, prefix])
    pieces.extend(_middle_pieces(old, new, prefix, suffix))
    if suffix:
        pieces.append([len(old) - suffix, len(old)])
    if not any(isinstance(p, list) for p in pieces):
        return ["=", new]
    return ["[", _coalesce(pieces)]


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _middle_pieces(old: list[Any], new: list[Any], prefix: int, suffix: int) -> list[Any]:
    """Pieces for ``new[prefix:-suffix]`` from ``old[prefix:-suffix]``."""
    a = old[prefix : len(old) - suffix]
    b = new[prefix : len(new) - suffix]
    if not b:
        return []
    if not a:
        return [{"+": b}]
    keys_a = [_item_key(x) for x in a]
    keys_b = [_item_key(x) for x in b]
    matcher = SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    pieces: list[Any] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pieces.append([prefix + i1, prefix + i2])
        elif tag in ("replace", "insert"):
            pieces.append({"+": b[j1:j2]})
    return pieces


def _item_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"))


def _coalesce(pieces: list[Any]) -> list[Any]:
    """Adjacent copies of contiguous ranges, and adjacent inserts, made one."""
    out: list[Any] = []
    for piece in pieces:
        last = out[-1] if out else None
        if isinstance(piece, list) and isinstance(last, list) and last[1] == piece[0]:
            out[-1] = [last[0], piece[1]]
        elif isinstance(piece, dict) and isinstance(last, dict):
            out[-1] = {"+": [*last["+"], *piece["+"]]}
        else:
            out.append(piece)
    return out


def apply(old: Any, patch: Patch) -> Any:
    """The value ``patch`` makes of ``old``; :class:`PatchError` if it does not fit.

    Unchanged parts of ``old`` are shared, not copied: treat both as immutable.
    """
    if not isinstance(patch, list) or not patch:
        raise PatchError(f"not a patch: {patch!r:.80}")
    op = patch[0]
    if op == "=" and len(patch) == 2:
        return patch[1]
    if op == "{" and len(patch) == 3:
        return _apply_object(old, patch[1], patch[2])
    if op == "[" and len(patch) == 2:
        return _apply_list(old, patch[1])
    raise PatchError(f"unknown patch {op!r:.20}")


def _apply_object(old: Any, changed: Any, removed: Any) -> dict[str, Any]:
    if not isinstance(old, dict) or not isinstance(changed, dict):
        raise PatchError("object patch on a value that is not an object")
    if not isinstance(removed, list):
        raise PatchError("object patch with malformed removals")
    out = dict(old)
    _remove(out, removed)
    for key, sub in changed.items():
        out[key] = apply(out[key], sub) if key in out else _added(key, sub)
    return out


def _remove(out: dict[str, Any], removed: list[Any]) -> None:
    """Delete the ``removed`` keys of an object patch from ``out``; each must be there."""
    for key in removed:
        if key not in out:
            raise PatchError(f"removal of absent key {key!r:.40}")
        del out[key]


def _added(key: str, sub: Any) -> Any:
    """The value a patch gives a key its object lacks: only a whole value (``=``) fits."""
    if isinstance(sub, list) and len(sub) == 2 and sub[0] == "=":
        return sub[1]
    raise PatchError(f"patch of absent key {key!r:.40}")


def _apply_list(old: Any, pieces: Any) -> list[Any]:
    if not isinstance(old, list) or not isinstance(pieces, list):
        raise PatchError("list patch on a value that is not a list")
    out: list[Any] = []
    for piece in pieces:
        if isinstance(piece, dict) and isinstance(piece.get("+"), list) and len(piece) == 1:
            out.extend(piece["+"])
        elif _is_range(piece, len(old)):
            out.extend(old[piece[0] : piece[1]])
        else:
            raise PatchError(f"bad list piece {piece!r:.40} for {len(old)} items")
    return out


def _is_range(piece: Any, size: int) -> bool:
    return (
        isinstance(piece, list)
        and len(piece) == 2
        and all(type(x) is int for x in piece)
        and 0 <= piece[0] < piece[1] <= size
    )


def apply_owned(
    state: dict[str, Any], patch: Patch, owned: set[str], appended: set[str] | None = None
) -> dict[str, Any]:
    """:func:`apply` onto a state dict the caller owns, in place where it can.

    ``owned`` names the top-level lists the caller made (it starts empty): a patch
    appending to one extends it in place, so replaying n appends costs their items,
    not n copies of the list. The result is ``state`` itself unless the patch
    replaces the whole value; ``owned`` is updated to match. ``appended``, when
    given, gets the keys whose lists the patch only appended to (its
    :func:`tail_items`).
    """
    if not (isinstance(patch, list) and len(patch) == 3 and patch[0] == "{"):
        owned.clear()
        result = apply(state, patch)
        if not isinstance(result, dict):
            raise PatchError("a state patch must yield an object")
        return dict(result)
    _, changed, removed = patch
    if not isinstance(changed, dict) or not isinstance(removed, list):
        raise PatchError("object patch with malformed changes or removals")
    _remove(state, removed)
    owned.difference_update(removed)
    for key, sub in changed.items():
        tail = _appended(state.get(key), sub)
        if tail is not None:
            if key not in owned:
                state[key] = list(state[key])
                owned.add(key)
            state[key].extend(tail)
            if appended is not None:
                appended.add(key)
        else:
            state[key] = apply(state[key], sub) if key in state else _added(key, sub)
            owned.discard(key)
    return state


def _appended(old: Any, sub: Any) -> list[Any] | None:
    """The items ``sub`` appends to the list ``old``, if that is all it does."""
    if not isinstance(old, list):
        return None
    found = tail_items(sub)
    if found is None or found[0] != len(old):
        return None
    return found[1]


def tail_items(sub: Any) -> tuple[int, list[Any]] | None:
    """``(k, items)`` when ``sub`` is the patch appending ``items`` to a list of ``k``
    items, else None."""
    if not (isinstance(sub, list) and len(sub) == 2 and sub[0] == "["):
        return None
    pieces = sub[1]
    if not (isinstance(pieces, list) and len(pieces) == 2):
        return None
    kept, added = pieces
    if not (isinstance(kept, list) and len(kept) == 2 and kept[0] == 0 and type(kept[1]) is int):
        return None
    if not (isinstance(added, dict) and len(added) == 1 and isinstance(added.get("+"), list)):
        return None
    items: list[Any] = added["+"]
    return kept[1], items
