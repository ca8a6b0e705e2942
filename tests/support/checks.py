"""Counting how often a value is checked or parsed while one piece of code runs.

:class:`Checks` wraps ``validate_namespace`` in every loaded module of ours that holds it
(each imports it by name) and ``json.loads``, and counts the calls made from our
packages, by calling module: what it costs to carry one value through the pipeline.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.store import validation

OURS = ("tulip_memory", "tulip_wire", "tulip_producer", "tulip_workers", "tulip_service")


def _caller(depth: int) -> str:
    return str(sys._getframe(depth).f_globals.get("__name__", "?"))


@dataclass
class Checks:
    """Calls counted, by the module that made them."""

    namespace: Counter[str] = field(default_factory=Counter)
    json: Counter[str] = field(default_factory=Counter)

    @property
    def namespace_checks(self) -> int:
        return sum(self.namespace.values())

    @property
    def json_parses(self) -> int:
        return sum(self.json.values())

    def clear(self) -> None:
        self.namespace.clear()
        self.json.clear()


def _counting(tally: Counter[str], real: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        caller = _caller(2)
        if caller.startswith(OURS):
            tally[caller] += 1
        return real(*args, **kwargs)

    return counted


@contextmanager
def counting() -> Iterator[Checks]:
    """Count ``validate_namespace`` and ``json.loads`` calls of our modules meanwhile."""
    checks = Checks()
    real_validate = validation.validate_namespace
    real_loads = json.loads
    holders = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith(OURS) and getattr(module, "validate_namespace", None) is real_validate
    ]
    validate = _counting(checks.namespace, real_validate)
    for module in holders:
        module.validate_namespace = validate  # type: ignore[attr-defined]
    json.loads = _counting(checks.json, real_loads)
    try:
        yield checks
    finally:
        json.loads = real_loads
        for module in holders:
            module.validate_namespace = real_validate  # type: ignore[attr-defined]
