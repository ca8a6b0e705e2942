"""The one retry rule every model call shares (extraction, summaries, embeddings)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tulip_memory.model_calls import is_retryable, retry_after_of, status_of


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status


class RateLimitError(Exception):
    """Named like litellm's / the OpenAI SDK's class."""


class _Subclassed(RateLimitError):
    pass


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (_Status(429), True),
        (_Status(408), True),
        (_Status(503), True),
        (_Status(400), False),
        (_Status(401), False),
        (_Subclassed(), True),
        (ValueError("model returned garbage"), False),
    ],
)
def test_retryable_classification(error: BaseException, retryable: bool) -> None:
    assert is_retryable(error) is retryable


def test_status_is_an_int_or_none() -> None:
    assert status_of(_Status(502)) == 502
    error = ValueError()
    error.status_code = True  # type: ignore[attr-defined]
    assert status_of(error) is None


def test_retry_after_from_litellm_headers() -> None:
    error = _Status(429)
    error.litellm_response_headers = {"Retry-After-Ms": "1500"}  # type: ignore[attr-defined]
    assert retry_after_of(error) == 1.5
    assert retry_after_of(_Status(429)) is None


def test_the_litellm_import_is_one_place_and_offline() -> None:
    code = (
        "import os; os.environ.pop('LITELLM_LOCAL_MODEL_COST_MAP', None);"
        "from tulip_memory.model_calls import import_litellm; m = import_litellm();"
        "assert os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] == 'True';"
        "assert m.suppress_debug_info is True"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
