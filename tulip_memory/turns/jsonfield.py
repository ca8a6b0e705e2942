"""Turns and metadata as JSON text, refused when JSON would not give them back unchanged.

Parquet columns need one type per column, and turn dicts differ in shape, so each
turn and metadata dict is stored as JSON. ``json.dumps`` silently turns tuples into
lists and int keys into strings; a persisted store must load back equal, so those
are refused up front instead.
"""

from __future__ import annotations

import json
from typing import Any


def dump_exact(value: Any) -> str:
    """``value`` as JSON text; ``TypeError``/``ValueError`` unless it round-trips equal."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if json.loads(text) != value:
        raise ValueError("JSON would not give it back unchanged (a tuple or a non-string key?)")
    return text


def load_object(text: str) -> dict[str, Any]:
    """A JSON object from ``text``; ``ValueError`` for anything else."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value
