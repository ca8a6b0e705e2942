"""``/healthz`` (the process answers) and ``/readyz`` (its database and broker do)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tulip_service import models
from tulip_service.routes import backend

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> models.Health:
    """The service answers (a liveness probe)."""
    return models.Health(status="ok")


@router.get(
    "/readyz",
    responses={503: {"model": models.Readiness, "description": "a dependency does not answer"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Postgres and the broker answer (a readiness probe); ``503`` while either does not."""
    service = backend(request)
    database, broker = await service.database_answers(), await service.broker_answers()
    ready = database and broker
    body = models.Readiness(
        status="ready" if ready else "unavailable", database=database, broker=broker
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
