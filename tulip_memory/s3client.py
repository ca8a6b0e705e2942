"""The one S3 client builder: checkpoints, summaries and claim checks all talk to S3
(AWS, MinIO, moto) through a client made here.

Each client comes from a session of its own (boto3's default session is not safe to
build clients from on several threads at once); credentials and region come from the
usual AWS configuration. Throttling, 5xx answers and dropped connections are retried
by botocore's retry modes (``"standard"`` by default, ``"adaptive"`` adds client-side
rate limiting, ``"legacy"`` is botocore's old default).
"""

from __future__ import annotations

from typing import Any

RETRY_MODES = ("standard", "adaptive", "legacy")


def s3_client(
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    retry_mode: str = "standard",
    max_attempts: int = 5,
    max_pool_connections: int = 10,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
) -> Any:
    """A boto3 S3 client; ``max_attempts`` counts the first attempt."""
    if retry_mode not in RETRY_MODES:
        raise ValueError(f"retry_mode must be standard, adaptive or legacy: {retry_mode!r}")
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url, region_name=region_name, config=config)
