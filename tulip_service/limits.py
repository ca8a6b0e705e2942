"""Request body limits: a body over ``TULIP_HTTP_MAX_BODY_BYTES`` is ``413`` before
it is read (by its ``Content-Length``) or as soon as it grows past the limit (a
chunked body), never buffered whole."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tulip_service.problems import BODY_TOO_LARGE, MALFORMED_BODY, response


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is over the service's limit of {limit} bytes")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            refusal = self._declared(declared, scope["path"])
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)

    def _declared(self, value: bytes, path: str) -> ASGIApp | None:
        if not value.isdigit():
            return response(MALFORMED_BODY, "Content-Length is not a number", path)
        if int(value) > self.max_bytes:
            detail = f"the body is over the service's limit of {self.max_bytes} bytes"
            return response(BODY_TOO_LARGE, detail, path)
        return None
