"""What the service's routes call: the Python producer and reader, and the key check.

One :class:`Backend` per process, built from the environment when the service
starts and closed when it stops (its producer's last flush included), so the service
publishes and reads exactly as an in-process chat backend would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tulip_producer import AsyncProducer, AsyncReader, ProducerSettings
from tulip_service.auth import Authenticator
from tulip_service.settings import ServiceSettings
from tulip_wire.endpoints import broker_endpoint


@dataclass
class Backend:
    settings: ServiceSettings
    producer: AsyncProducer
    reader: AsyncReader
    auth: Authenticator

    @classmethod
    def from_env(cls, settings: ServiceSettings | None = None) -> Backend:
        settings = settings or ServiceSettings.from_env()
        reader = AsyncReader.from_env()
        producer = AsyncProducer(ProducerSettings.from_env())
        return cls(settings, producer, reader, Authenticator(settings, reader.store.connection))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Backend]:
        """Open for the service's lifetime: publishes run on threads of their own
        (``TULIP_HTTP_PUBLISH_THREADS``: each is a blocking broker round trip); on exit
        the producer flushes what it can and the store's pool closes."""
        loop = asyncio.get_running_loop()
        threads = ThreadPoolExecutor(self.settings.publish_threads, "tulip-http-publish")
        loop.set_default_executor(threads)
        try:
            yield self
        finally:
            try:
                await self.producer.close()
            finally:
                await self.reader.close()
                threads.shutdown(wait=False)

    async def database_answers(self) -> bool:
        try:
            async with self.reader.store.connection() as conn:
                await asyncio.wait_for(conn.fetchval("SELECT 1"), 2.0)
        except Exception:
            return False
        return True

    async def broker_answers(self) -> bool:
        url = self.producer.sync.settings.broker_url
        try:
            await asyncio.wait_for(asyncio.to_thread(_connect_broker, url), 3.0)
        except Exception:
            return False
        return True


def _connect_broker(url: str) -> None:
    """Open and close one broker connection (Redis: a PING; AMQP: the handshake)."""
    from kombu import Connection

    endpoint = broker_endpoint(url)
    options: dict[str, Any] = {**endpoint.transport_options, "max_retries": 0}
    options |= {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    with Connection(
        endpoint.url, ssl=endpoint.use_ssl or False, transport_options=options, connect_timeout=2
    ) as connection:
        connection.ensure_connection(max_retries=0)
        connection.default_channel  # noqa: B018 - opening the channel is the check
