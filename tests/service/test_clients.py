"""The non-Python clients of docs/http.md (curl, JavaScript on Node's fetch) run
against a live service; each is skipped where its tool is not installed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.service.conftest import Stack

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _env(stack: Stack, tenant: str) -> dict[str, str]:
    return {
        **stack.env,
        "TULIP_HTTP_URL": stack.url,
        "TULIP_API_KEY": stack.key(tenant),
        "TULIP_TENANT": tenant,
    }


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_example(stack: Stack, tenant: str, tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(EXAMPLES / "http_client.sh")],
        cwd=tmp_path, env=_env(stack, tenant), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    status, recalled, saved, thread, refused = (json.loads(line) for line in lines)
    assert status["state"] in ("pending", "applied")
    assert "memories" in recalled and "checkpoint_id" in saved
    assert thread["iterations"] == 9 and thread["messages"][0]["content"] == "Alert 7731 fired."
    assert refused["type"] == "urn:tulip-memory:problem:foreign-namespace"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_node_example(stack: Stack, tenant: str) -> None:
    done = subprocess.run(
        ["node", str(EXAMPLES / "http_client.mjs")],
        env=_env(stack, tenant), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["state"] == "applied"
    assert out["memories"] == ["The user's favourite colour is teal."]
    assert (out["messages"], out["iterations"]) == (2, 1)
