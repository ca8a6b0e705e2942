"""A counting semaphore in Redis that bounds work across processes and hosts.

Used to cap in-flight LLM calls over every worker (``TULIP_LLM_MAX_INFLIGHT``,
invariant 7). Each holder owns a *lease*: a member of one sorted set whose score is
the lease's expiry on the Redis server's clock. Admission is one Lua script that first
drops expired leases and then admits only while fewer than ``limit`` remain, so a
holder that crashes (SIGKILL, lost host) frees its slot when its lease runs out, and
the clocks of the worker hosts never matter. A holder that may outlive its lease calls
:meth:`RedisSemaphore.renew`.

Waiting is polling with short jittered pauses; the async API runs each Redis round
trip in a thread (never blocking the event loop) and shares the pause schedule with
the sync API.

A caller that names its ``tenant`` is admitted fairly across tenants
(``lua/semaphore_acquire_fair.lua``): a free slot goes to the waiting tenant holding
the fewest slots, the one that began to wait first among those, and no tenant holds
more than its share of the limit (``TULIP_TENANT_MAX_INFLIGHT``). The workers name the
tenant of the event they run (:mod:`tulip_workers.fairshare`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from functools import cached_property

import redis

from tulip_memory.errors import TulipMemoryError
from tulip_memory.store.validation import NS_SEP
from tulip_wire.endpoints import redis_client
from tulip_wire.env import redis_url
from tulip_wire.scripts import lua
from tulip_wire.topology import SEMAPHORE_PREFIX, fair_keys
from tulip_workers.keyed import tenant_cap
from tulip_workers.settings import LlmLimits

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: How long a caller waits for a slot unless it says otherwise: long enough to ride out
#: a burst of slow LLM calls, short enough that a stuck semaphore surfaces as an error.
DEFAULT_TIMEOUT = 120.0
_FIRST_PAUSE = 0.01
_MAX_PAUSE = 0.25
#: A fair waiter asks more often: a slot kept for its tenant stays free until it does.
_FAIR_MAX_PAUSE = 0.1
#: A tenant that has not asked for this long waits no more (its callers gave up).
_FAIR_STALE_MS = 1000

logger = logging.getLogger(__name__)


class SemaphoreTimeout(TulipMemoryError, TimeoutError):
    """No slot became free within ``timeout`` seconds."""

    def __init__(self, name: str, limit: int, timeout: float) -> None:
        self.name = name
        self.limit = limit
        self.timeout = timeout
        super().__init__(f"semaphore {name!r} (limit {limit}) had no free slot in {timeout:g}s")


class RedisSemaphore:
    """At most ``limit`` holders of ``name`` at once, over every process using Redis."""

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        limit: int,
        lease_seconds: float = 60.0,
        *,
        tenant_share: float | None = None,
    ) -> None:
        _check_args(name, limit, lease_seconds)
        self.client = client
        self.name = name
        self.limit = limit
        self.lease_seconds = lease_seconds
        #: Slots one tenant may hold at once (callers that name their tenant).
        self.tenant_cap = tenant_cap(tenant_share, limit)
        self.key = f"{SEMAPHORE_PREFIX}{name}"
        self._fair_keys = fair_keys(name)
        self._acquire = client.register_script(lua(__file__, "semaphore_acquire.lua"))
        self._acquire_fair = client.register_script(lua(__file__, "semaphore_acquire_fair.lua"))
        self._renew = client.register_script(lua(__file__, "semaphore_renew.lua"))
        self._release = client.register_script(lua(__file__, "semaphore_release.lua"))

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self.lease_seconds * 1000))

    def try_acquire(self, tenant: str | None = None) -> str | None:
        """One admission attempt, without waiting: a holder token, or ``None`` if full
        (or, for a ``tenant``, if the slot is another waiting tenant's turn)."""
        if tenant is None:
            token = uuid.uuid4().hex
            admitted = self._acquire(keys=[self.key], args=[self.limit, self._lease_ms, token])
            return token if admitted == 1 else None
        token = f"{tenant}{NS_SEP}{uuid.uuid4().hex}"
        keys = [self.key, *self._fair_keys]
        args: list[str | int] = [self.limit, self._lease_ms, token, tenant]
        args += [self.tenant_cap, _FAIR_STALE_MS]
        return token if self._acquire_fair(keys=keys, args=args) == 1 else None

    def acquire(self, timeout: float = DEFAULT_TIMEOUT, tenant: str | None = None) -> str:
        """Wait up to ``timeout`` seconds for a slot (fairly across tenants, for a
        ``tenant``); returns the holder token."""
        for pause in _pauses(timeout, fair=tenant is not None):
            time.sleep(pause)
            if token := self.try_acquire(tenant):
                return token
        raise SemaphoreTimeout(self.name, self.limit, timeout)

    # The deadline is part of the contract (SemaphoreTimeout names the semaphore), and
    # the same word as the sync API; callers may still wrap it in asyncio.timeout.
    async def aacquire(
        self,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109
        tenant: str | None = None,
    ) -> str:
        """:meth:`acquire` for coroutines: the event loop keeps running while it waits."""
        for pause in _pauses(timeout, fair=tenant is not None):
            await asyncio.sleep(pause)
            if token := await self._try_acquire_off_loop(tenant):
                return token
        raise SemaphoreTimeout(self.name, self.limit, timeout)

    def release(self, token: str) -> bool:
        """Give the slot back. ``False`` (and no harm done) if the token is unknown or its
        lease had expired: then the holder may have overlapped a later one."""
        return int(self._release(keys=[self.key], args=[token])) == 1

    def renew(self, token: str) -> bool:
        """Extend a live lease by ``lease_seconds`` from now; ``False`` if it had expired."""
        return int(self._renew(keys=[self.key], args=[token, self._lease_ms])) == 1

    def holders(self) -> int:
        """How many leases are live now (for metrics and tests)."""
        seconds, micros = self.client.time()
        now_ms = seconds * 1000 + micros // 1000
        return int(self.client.zcount(self.key, f"({now_ms}", "+inf"))

    @contextmanager
    def slot(self, timeout: float = DEFAULT_TIMEOUT, tenant: str | None = None) -> Iterator[str]:
        """Hold a slot for the ``with`` block, its lease renewed every third of
        ``lease_seconds`` while the block runs (so the limit holds for blocks of any
        length, and a crashed holder's slot still frees within one lease)."""
        token = self.acquire(timeout, tenant)
        stop_renewing = self._renewing(token)
        try:
            yield token
        finally:
            stop_renewing()
            self._check_released(self.release(token))

    @asynccontextmanager
    async def aslot(
        self,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109
        tenant: str | None = None,
    ) -> AsyncIterator[str]:
        """Hold a slot for the ``async with`` block, renewed like :meth:`slot` (from a
        thread, so a block that holds up the event loop keeps its lease too)."""
        token = await self.aacquire(timeout, tenant)
        stop_renewing = self._renewing(token)
        try:
            yield token
        finally:
            stop_renewing()
            # Runs to the end in its thread even if this task is cancelled meanwhile.
            self._check_released(await asyncio.to_thread(self.release, token))

    @property
    def _renew_every(self) -> float:
        return self.lease_seconds / 3

    def _renewing(self, token: str) -> Callable[[], None]:
        """Renew ``token``'s lease until the returned function is called (which returns
        at once), from the one thread that renews every lease this object holds."""
        return self._renewals.add(token)

    @cached_property
    def _renewals(self) -> _Renewals:
        return _Renewals(self)

    def _renewed(self, token: str) -> bool:
        """Renew once; ``False`` when the lease is gone (nothing left to renew). A
        Redis error is logged and the next renewal tries again."""
        try:
            return self.renew(token)
        except redis.RedisError as e:
            logger.warning("semaphore %r: could not renew a lease (%s)", self.name, e)
            return True

    def _check_released(self, held: bool) -> None:
        if not held:
            logger.warning(
                "semaphore %r: a lease of %gs expired while held, so the limit of %d may "
                "have been exceeded; renew() long holders or raise lease_seconds",
                self.name,
                self.lease_seconds,
                self.limit,
            )

    async def _try_acquire_off_loop(self, tenant: str | None) -> str | None:
        attempt = asyncio.ensure_future(asyncio.to_thread(self.try_acquire, tenant))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The thread finishes anyway; a slot it wins has no owner, so give it back.
            attempt.add_done_callback(self._release_orphan)
            raise

    def _release_orphan(self, attempt: asyncio.Future[str | None]) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        if token := attempt.result():
            asyncio.get_running_loop().run_in_executor(None, self.release, token)


class _Renewals:
    """The leases one :class:`RedisSemaphore` holds, renewed every third of a lease by
    one thread (started on the first, again after a fork): a thread per held slot cost
    a thread start per model call."""

    def __init__(self, semaphore: RedisSemaphore) -> None:
        self._semaphore = semaphore
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, token: str) -> Callable[[], None]:
        with self._lock:
            self._tokens.add(token)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tulip-leases", daemon=True)
                self._thread.start()
        return lambda: self._discard(token)

    def _discard(self, token: str) -> None:
        with self._lock:
            self._tokens.discard(token)

    def _held(self, token: str) -> bool:
        with self._lock:
            return token in self._tokens

    def _run(self) -> None:
        while True:
            time.sleep(self._semaphore._renew_every)
            with self._lock:
                tokens = list(self._tokens)
            for token in tokens:
                if self._held(token) and not self._semaphore._renewed(token):
                    if self._held(token):  # else it was released meanwhile
                        logger.warning(
                            "semaphore %r: a lease expired before renewal", self._semaphore.name
                        )
                    self._discard(token)


def semaphore_from_env(name: str = "llm", lease_seconds: float | None = None) -> RedisSemaphore:
    """The semaphore ``name`` on ``TULIP_REDIS_URL`` (else a Redis ``TULIP_BROKER_URL``),
    limited to ``TULIP_LLM_MAX_INFLIGHT``; leases of ``TULIP_LLM_LEASE_SECONDS`` (60),
    renewed while held: how soon a crashed holder's slot comes free."""
    limits = LlmLimits.from_env()
    if lease_seconds is not None:
        limits = replace(limits, lease_seconds=lease_seconds)
    return llm_semaphore(redis_url(), limits, name)


def llm_semaphore(
    url: str | None, limits: LlmLimits, name: str = "llm", *, tenant_share: float | None = None
) -> RedisSemaphore:
    """The semaphore ``name`` on ``url`` (else a local Redis), as ``limits`` say; a
    tenant holds at most ``tenant_share`` of it (``None``: all)."""
    client = redis_client(url or DEFAULT_REDIS_URL)
    return RedisSemaphore(
        client, name, limits.max_inflight, limits.lease_seconds, tenant_share=tenant_share
    )


def _pauses(timeout: float, *, fair: bool = False) -> Iterator[float]:
    """Pauses before each attempt: none first, then jittered and growing (less for a
    ``fair`` waiter), ending at the deadline (so the last attempt happens at ``timeout``)."""
    most = _FAIR_MAX_PAUSE if fair else _MAX_PAUSE
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a finite number >= 0, got {timeout!r}")
    deadline = time.monotonic() + timeout
    yield 0.0
    step = _FIRST_PAUSE
    while (left := deadline - time.monotonic()) > 0:
        yield min(left, random.uniform(step / 2, step))
        step = min(step * 2, most)


def _check_args(name: str, limit: int, lease_seconds: float) -> None:
    if not name:
        raise ValueError("semaphore name must not be empty")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    if not math.isfinite(lease_seconds) or lease_seconds < 0.001:
        raise ValueError(f"lease_seconds must be a finite number >= 0.001, got {lease_seconds!r}")
