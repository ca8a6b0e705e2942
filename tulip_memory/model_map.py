"""litellm's bundled model map (prices, capabilities), read without importing litellm.

The calls that go through the OpenAI SDK (:mod:`tulip_memory.chat`) are priced and
checked for JSON-schema support from the same data litellm uses, the
``model_prices_and_context_window_backup.json`` it ships and loads itself when
``LITELLM_LOCAL_MODEL_COST_MAP`` is set (as :func:`tulip_memory.model_calls.import_litellm`
sets it). Importing litellm costs seconds and about 175 MB per process; this file is
read once per model asked about (tens of milliseconds), and only that model's entry is
kept.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAP_FILE = "model_prices_and_context_window_backup.json"


@functools.lru_cache(maxsize=64)
def model_entry(model: str) -> Mapping[str, Any] | None:
    """The map's entry for ``model`` (``provider/name`` or ``name``): the name alone
    first, as litellm looks it up, then the whole string; ``None`` when neither is
    there or the map cannot be read."""
    data = _load()
    name = model.split("/", 1)[-1]
    for key in (name, model):
        entry = data.get(key)
        if isinstance(entry, dict):
            return dict(entry)
    return None


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The list price of a call's tokens, ``None`` for a model the map has no price for."""
    entry = model_entry(model) or {}
    per_in, per_out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not isinstance(per_in, int | float) or not isinstance(per_out, int | float):
        return None
    if isinstance(per_in, bool) or isinstance(per_out, bool) or min(per_in, per_out) < 0:
        return None
    return float(prompt_tokens * per_in + completion_tokens * per_out)


def supports_response_schema(model: str) -> bool:
    """Whether the map says ``model`` takes a JSON-schema ``response_format``."""
    return bool((model_entry(model) or {}).get("supports_response_schema"))


def _load() -> Mapping[str, Any]:
    spec = importlib.util.find_spec("litellm")  # finds the package; does not import it
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    for place in places:
        path = Path(place) / MAP_FILE
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    log.warning("litellm's model map (%s) is not readable: calls are not priced", MAP_FILE)
    return {}
