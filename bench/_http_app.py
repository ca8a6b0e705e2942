"""The service as ``tulip-memory serve`` builds it, plus the benchmark's floor: a no-op
``POST``/``GET /bench/noop`` behind the same middleware and the same key check, which
publishes and reads nothing (``uvicorn --factory bench._http_app:create``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, FastAPI

from tulip_service.app import create_app
from tulip_service.auth import Principal
from tulip_service.routes import reader, writer


def create() -> FastAPI:
    app = create_app()

    @app.post("/bench/noop", status_code=202)
    async def noop_post(who: Annotated[Principal, Depends(writer)]) -> dict[str, str]:
        return {"event_id": "0" * 32}

    @app.get("/bench/noop")
    async def noop_get(who: Annotated[Principal, Depends(reader)]) -> dict[str, str]:
        return {"memories": ""}

    return app
