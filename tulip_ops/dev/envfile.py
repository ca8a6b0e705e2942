"""``tulip.env``: the dev stack's settings, for a shell and for a Procfile runner.

``KEY='value'`` lines (shell-quoted) and one ``export KEY ...`` line at the end:
``source tulip.env`` (or ``.``) sets and exports them for the shell's children, and
``honcho -e tulip.env`` (which reads ``KEY=value`` lines and skips the others) gets
the same values. ``export KEY=value`` lines would be skipped by honcho.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

HEADER = (
    "# Written by `tulip-memory dev`; valid while it runs.\n"
    "# `source` it (a shell exports every setting) or `honcho -e` it.\n"
)


def render_env(settings: Mapping[str, str]) -> str:
    names = sorted(settings)
    lines = [f"{name}={shlex.quote(settings[name])}" for name in names]
    return HEADER + "\n".join([*lines, "export " + " ".join(names)]) + "\n"
