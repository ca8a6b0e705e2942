"""``tulip.env`` as a shell and honcho read it, values with quotes and spaces included."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import honcho.environ

from tulip_ops.dev.envfile import render_env

SETTINGS = {
    "TULIP_DATABASE_URL": "postgresql://tulip_app:p'w d$x@127.0.0.1:5432/tulip",
    "TULIP_SPOOL_DIR": "/tmp/my data/spool",
    "TULIP_FLOWER_PASSWORD": 'a"b`c\\\\d',
}


def test_sourced_in_a_subshell_every_setting_is_exported(tmp_path: Path) -> None:
    path = tmp_path / "tulip.env"
    path.write_text(render_env(SETTINGS))
    script = f"source '{path}' && python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    out = subprocess.run(
        ["bash", "-c", script],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    child = json.loads(out)
    assert {k: child.get(k) for k in SETTINGS} == SETTINGS


def test_honcho_reads_the_same_values() -> None:
    assert honcho.environ.parse(render_env(SETTINGS)) == SETTINGS
