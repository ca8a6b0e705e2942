"""``tulip-memory serve``: the service on uvicorn, stopped gracefully.

On SIGTERM or SIGINT uvicorn stops accepting connections, lets the requests in
flight finish (at most ``TULIP_HTTP_DRAIN_SECONDS``), then the service closes its
producer (a last bounded flush of its spool) and its database pool.
"""

from __future__ import annotations

import logging
import signal

from tulip_service.backend import Backend
from tulip_service.settings import ServiceSettings

log = logging.getLogger(__name__)


def serve(address: str, port: int | None = None, settings: ServiceSettings | None = None) -> int:
    """Run the service until a signal stops it; its exit status."""
    import uvicorn

    from tulip_service.app import create_app

    settings = settings or ServiceSettings.from_env()
    backend = Backend.from_env(settings)  # a missing or malformed setting fails here
    port = settings.port if port is None else port
    config = uvicorn.Config(
        create_app(lambda: backend, settings),
        host=address,
        port=port,
        lifespan="on",
        timeout_graceful_shutdown=int(settings.drain_seconds + 0.999),
        log_config=None,
        access_log=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    print(f"tulip-memory serve: http://{address}:{port} (OpenAPI at /openapi.json)", flush=True)
    # uvicorn handles SIGTERM/SIGINT while it runs, then raises the signal again under
    # the handlers it found: these make a drained stop exit 0, not die of the signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    return 0 if server.started else 1
