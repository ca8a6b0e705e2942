"""The ASGI application: ``/v1`` (:mod:`~tulip_service.routes`), ``/healthz`` and
``/readyz``, ``/metrics``, every error as problem details, bodies bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from tulip_service import health, problems, routes
from tulip_service.backend import Backend
from tulip_service.limits import BodyLimit
from tulip_service.metrics import HttpMetrics, MetricsMiddleware
from tulip_service.settings import ServiceSettings

TITLE = "tulip-memory"
VERSION = "1"
DESCRIPTION = (
    "Memory for chat backends in any language: publish session ends and checkpoints "
    "(accepted with 202, applied in order per key by the workers), load threads (read "
    "your writes), recall memories and turns. Every request carries a tenant-bound API "
    "key or JWT as `Authorization: Bearer ...`; the tenant is always the credential's. "
    "Errors are RFC 9457 problem details."
)


def create_app(
    make_backend: Callable[[], Backend] | None = None, settings: ServiceSettings | None = None
) -> FastAPI:
    """The service; ``make_backend`` builds its :class:`Backend` when it starts (by
    default from the environment)."""
    settings = settings or ServiceSettings.from_env()
    build = make_backend or (lambda: Backend.from_env(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with build().running() as backend:
            app.state.backend = backend
            yield

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        responses={},
    )
    problems.install(app)
    app.include_router(routes.router)
    app.include_router(health.router)
    metrics = HttpMetrics()
    app.add_route("/metrics", metrics.endpoint, include_in_schema=False)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    return app


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI 3.1 document, with the problem details schema every error refers to."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        doc = get_openapi(
            title=app.title,
            version=app.version,
            openapi_version=app.openapi_version,
            description=app.description,
            routes=app.routes,
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in (problems.ProblemDetails, problems.ProblemError):
            schemas[model.__name__] = model.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
        app.openapi_schema = doc
    return app.openapi_schema
