"""The OpenAI SDK's HTTP client, every reply of which is read through a bound.

A model server is not trusted with the worker's memory: a broken or hostile one (or a
gateway in front of it) may answer with a body of any size, a chat completion's or an
error's, which the SDK reads whole to raise its status error, or a small compressed
body that decodes to gigabytes. So every response this client receives goes through
:func:`bound` (an ``httpx2`` response hook) before a byte of its body is read: one whose
``Content-Length`` passes :data:`MAX_REPLY_BYTES`, or that comes compressed though
asked for as it is (``Accept-Encoding: identity``), is refused at once, and any other
stops being read as soon as it passes the bound. The refusal is
:class:`ReplyTooLarge`, a reasoned failure that is not retried; the client closes the
response and its connection.

Imported by :mod:`tulip_memory.chat` only where a call goes through the SDK, like the
SDK itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

#: A chat completion body longer than this is not read: a reply of the longest model
#: output extraction reads (256 Ki characters, :mod:`tulip_memory.extract.parse`), JSON
#: escaped, fits it several times over; an error's body is a few hundred bytes.
MAX_REPLY_BYTES = 8 * 1024 * 1024
#: Replies asked for as they are, so their size on the wire is their size read.
HEADERS = {"Accept-Encoding": "identity"}


class ReplyTooLarge(ValueError):
    """A model server's reply body over :data:`MAX_REPLY_BYTES`, or compressed though
    asked for as it is (its decoded size unbounded): not read, not retried."""


def client() -> Any:
    """An ``httpx2`` client with the SDK's own defaults, every response bounded."""
    import openai

    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [bound]})


async def bound(response: httpx2.Response) -> None:
    """Refuse ``response`` if its headers say its body passes the bound; else read its
    body through :class:`BoundedStream`."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
        raise ReplyTooLarge(
            f"reply body of {int(declared):,} bytes, over {MAX_REPLY_BYTES:,}: not read"
        )
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise ReplyTooLarge(f"reply compressed ({encoding}) though asked for as it is: not read")
    response.stream = BoundedStream(response.stream, MAX_REPLY_BYTES)


class BoundedStream(httpx2.AsyncByteStream):
    """A response's byte stream that fails once it has passed ``limit`` bytes (the
    response is then closed by the reader, ``httpx2``'s own iteration)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise ReplyTooLarge(f"reply body over {self._limit:,} bytes: not read")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
