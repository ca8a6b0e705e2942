"""Where in a payload a value is that JSON cannot carry.

``json.dumps`` says "Object of type datetime is not JSON serializable" and not where;
in a session of 200 messages the caller needs the path: ``messages[3].metadata.when``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_TYPES = (str, int, float, bool, type(None))  # json.dumps turns these keys into strings


def non_json_value(value: Any, path: str = "") -> str | None:
    """``"<path> is a <type>, not a JSON value"`` for the first value ``json.dumps``
    (``allow_nan=False``) refuses, depth first in order; ``None`` when there is none."""
    here = path or "the value"
    if isinstance(value, str | bool | int | type(None)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{here} is {value}, not a JSON number"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, _KEY_TYPES):
                return f"{here} has a key of type {type(key).__name__}, not a string"
            found = non_json_value(item, _join(path, key))
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = non_json_value(item, f"{path}[{i}]")
            if found:
                return found
        return None
    return f"{here} is a {type(value).__name__}, not a JSON value"


def _join(path: str, key: object) -> str:
    text = str(key)
    if _IDENTIFIER.fullmatch(text):
        return f"{path}.{text}" if path else text
    return f"{path}[{text!r}]"
