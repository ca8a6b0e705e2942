"""The contract: the OpenAPI document served is the one checked in, and
property-based requests against the live service (schemathesis, valid and invalid
ones alike) find no 5xx and no response the document does not describe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.conftest import Stack
from tulip_service.openapi import text

WORKERS = False  # nothing here waits for an event to be applied
DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m tulip_service.openapi docs/openapi.json"
#: Examples per operation and mode: the suite's share (a few seconds per operation).
EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


def test_the_checked_in_document_is_the_one_served(stack: Stack) -> None:
    assert DOCUMENT.read_text(encoding="utf-8") == text(), (
        f"docs/openapi.json drifted from the service: if the change is deliberate, "
        f"regenerate it with `{REGENERATE}` and commit it with the change"
    )
    served = httpx.get(f"{stack.url}/openapi.json").json()
    assert served == json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert served["openapi"] == "3.1.0"


#: The server itself (uvicorn's HTTP parser) refuses a request line over 64 KiB with a
#: plain 400 before the application sees it; invalid requests that long are not sent.
MAX_URL = 60_000
OPERATIONS = [
    (path, method.upper(), mode)
    for path, methods in json.loads(DOCUMENT.read_text(encoding="utf-8"))["paths"].items()
    for method, spec in methods.items()
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or spec.get("parameters") or spec.get("requestBody")
]


@pytest.fixture(scope="module")
def api(stack: Stack) -> Any:
    return schemathesis.openapi.from_url(f"{stack.url}/openapi.json")


@pytest.fixture(scope="module")
def auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.key('fuzz')}"}


@pytest.mark.parametrize(("path", "method", "mode"), OPERATIONS)
def test_no_5xx_and_nothing_outside_the_document(
    api: Any, auth: dict[str, str], path: str, method: str, mode: GenerationMode
) -> None:
    """Generated requests (the document's valid ones, and invalid ones) with a key of
    tenant ``fuzz``: every answer is documented, none is a 5xx, every invalid request
    is refused, and none is served without the credential."""
    operation = api[path][method]

    @given(operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        assume(_url_length(case) < MAX_URL)
        case.call_and_validate(headers=auth, checks=CHECKS, timeout=30)

    call()


def _url_length(case: Any) -> int:
    path = sum(len(quote(str(v), safe="")) for v in (case.path_parameters or {}).values())
    return len(case.path) + path + len(urlencode(case.query or {}, doseq=True))
