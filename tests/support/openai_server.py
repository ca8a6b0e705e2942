"""A local OpenAI-compatible HTTP server for tests, so litellm runs its real HTTP path.

Embeddings are deterministic (:class:`HashingEmbedder`); chat replies and failures
(429, 5xx, delays, malformed bodies) are scripted per request, first in first out.
Every request is recorded, and the number served at once is tracked so tests can
assert concurrency bounds. By default connections are closed after each response
(HTTP/1.0); ``keep_alive=True`` serves HTTP/1.1 persistent connections, as a real
provider does (a benchmark's client then pays no TCP setup per call), and
:meth:`FakeOpenAI.stop` shuts the idle ones down rather than wait on them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tulip_memory.embeddings.base import Vectors
from tulip_memory.embeddings.hashing import HashingEmbedder

JSON = dict[str, Any]

_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout", "timeout"),
    429: ("requests", "rate_limit_exceeded"),
}
DEFAULT_CHAT_CONTENT = "This is a fake reply."


@dataclass
class Reply:
    """One scripted answer; a non-200 status sends an OpenAI-style error body."""

    content: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: JSON | None = None


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    json: JSON
    headers: dict[str, str]


def echo_default_chat(request: JSON) -> Reply:
    """The default chat answer: a fixed sentence, whatever was asked."""
    return Reply(content=DEFAULT_CHAT_CONTENT)


def error_body(status: int, message: str) -> JSON:
    fallback = (
        ("server_error", "server_error") if status >= 500 else ("invalid_request_error", None)
    )
    kind, code = _ERROR_TYPES.get(status, fallback)
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def _count_words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_count_words(v) for v in value)
    if isinstance(value, dict):
        return _count_words(value.get("content", ""))
    return 0


class _BadRequest(Exception):
    """The request cannot be answered; turned into a 400 error body."""


class _NotFound(Exception):
    """No such route; turned into a 404 error body."""


class FakeOpenAI:
    """``/v1/embeddings`` and ``/v1/chat/completions`` on 127.0.0.1, on an ephemeral port."""

    def __init__(
        self, *, embedding_dim: int = 64, embedding_delay: float = 0.0, keep_alive: bool = False
    ) -> None:
        """``embedding_delay``: seconds before each unscripted ``/v1/embeddings``
        answer, whatever its size (a model server of fixed cost a request);
        ``keep_alive``: persistent HTTP/1.1 connections instead of one per request."""
        if embedding_delay < 0:
            raise ValueError(f"embedding_delay must be >= 0, got {embedding_delay}")
        self.embedding_dim = embedding_dim
        self.embedding_delay = embedding_delay
        self.keep_alive = keep_alive
        self.default_chat: Callable[[JSON], Reply] = echo_default_chat
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._chat_script: deque[Reply] = deque()
        self._embedding_script: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._inflight = 0
        self._max_inflight = 0
        self._counter = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAI is already running")
        self._stopping.clear()
        handler = _KeepAliveHandler if self.keep_alive else _Handler
        self._httpd = _Server(("127.0.0.1", 0), handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.name = f"fake-openai-{self.port}"
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut scripted delays short, join every handler and the server thread."""
        if self._httpd is None or self._thread is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.hang_up()  # idle keep-alive connections: their handlers return
        self._httpd.server_close()  # joins the handler threads (block_on_close)
        self._thread.join()
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread | None:
        """The serving thread, for tests that check it is gone after :meth:`stop`."""
        return self._thread

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeOpenAI is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The ``api_base`` to hand litellm or the OpenAI SDK."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting and records -------------------------------------------------------

    def script_chat(self, *replies: Reply) -> None:
        with self._lock:
            self._chat_script.extend(replies)

    def script_embeddings(self, *replies: Reply) -> None:
        with self._lock:
            self._embedding_script.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    @property
    def inflight(self) -> int:
        with self._lock:
            return self._inflight

    @property
    def max_inflight(self) -> int:
        with self._lock:
            return self._max_inflight

    def reset(self) -> None:
        """Forget scripts, records and counters; ``default_chat`` and requests being served stay."""
        with self._lock:
            self._chat_script.clear()
            self._embedding_script.clear()
            self._requests.clear()
            self._max_inflight = self._inflight

    def embedding_vectors(self, texts: Sequence[str], dimension: int | None = None) -> Vectors:
        """The vectors this server answers for ``texts`` (float32, one row per text)."""
        return HashingEmbedder(dimension or self.embedding_dim).embed(list(texts))

    def embedding_body(
        self,
        texts: Sequence[str],
        *,
        dimension: int | None = None,
        model: str = "fake-embedding",
        encoding_format: str = "float",
    ) -> JSON:
        """A complete ``/v1/embeddings`` response body, e.g. to script a tampered one."""
        vectors = self.embedding_vectors(texts, dimension)
        tokens = _count_words(list(texts))
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encode(v, encoding_format)}
                for i, v in enumerate(vectors)
            ],
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    # -- called by the handler threads -----------------------------------------------

    def _enter(self, record: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(record)
            self._inflight += 1
            self._max_inflight = max(self._max_inflight, self._inflight)

    def _leave(self) -> None:
        with self._lock:
            self._inflight -= 1

    def _next_reply(self, script: deque[Reply]) -> Reply | None:
        with self._lock:
            return script.popleft() if script else None

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _wait(self, seconds: float) -> None:
        """Sleep for a scripted delay, but return at once when the server stops."""
        if seconds > 0:
            self._stopping.wait(seconds)

    def _answer(self, path: str, request: JSON) -> tuple[Reply, JSON]:
        """The reply to send and its JSON body."""
        if request.get("stream"):
            raise _BadRequest("stream=true is not supported by FakeOpenAI")
        if path == "/v1/embeddings":
            reply = self._next_reply(self._embedding_script) or Reply(delay=self.embedding_delay)
            return reply, self._body(reply, lambda: self._embeddings(request))
        if path == "/v1/chat/completions":
            reply = self._next_reply(self._chat_script) or self.default_chat(request)
            return reply, self._body(reply, lambda: self._chat(request, reply))
        raise _NotFound(f"no route for POST {path}")

    def _body(self, reply: Reply, success: Callable[[], JSON]) -> JSON:
        if reply.body is not None:
            return reply.body
        if reply.status != 200:
            return error_body(reply.status, reply.content or f"scripted error {reply.status}")
        return success()

    def _embeddings(self, request: JSON) -> JSON:
        texts = request.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise _BadRequest("input must be a string or a list of strings")
        dimension = request.get("dimensions") or self.embedding_dim
        if not isinstance(dimension, int) or dimension < 1:
            raise _BadRequest(f"dimensions must be a positive integer, got {dimension!r}")
        return self.embedding_body(
            texts,
            dimension=dimension,
            model=str(request.get("model", "fake-embedding")),
            encoding_format=str(request.get("encoding_format") or "float"),
        )

    def _chat(self, request: JSON, reply: Reply) -> JSON:
        prompt_tokens = _count_words(request.get("messages", []))
        completion_tokens = _count_words(reply.content)
        return {
            "id": f"chatcmpl-fake-{self._next_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model", "fake-chat")),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _encode(vector: Vectors, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


class _Server(ThreadingHTTPServer):
    """Non-daemon handler threads, so ``server_close`` joins every one of them."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 128  # tests open many connections at once

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        fake: FakeOpenAI,
    ) -> None:
        super().__init__(address, handler)
        self.fake = fake
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def hang_up(self) -> None:
        """End every open connection's reads, so a handler waiting for a keep-alive
        connection's next request returns. Only reads: a handler whose request is in
        flight (its delay cut short) still sends its answer."""
        with self._open_lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RD)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def do_POST(self) -> None:
        fake = self.server.fake
        request = self._read_json()
        fake._enter(RecordedRequest(self.path, request or {}, self._header_dict()))
        try:
            status, body, headers = self._prepare(fake, request)
        finally:
            fake._leave()  # before sending: a client holding the answer sees the count drop
        self._send(status, body, headers)

    def do_GET(self) -> None:
        self._send(404, error_body(404, f"no route for GET {self.path}"), {})

    def _prepare(self, fake: FakeOpenAI, request: JSON | None) -> tuple[int, JSON, dict[str, str]]:
        """Status, body and headers to send, after the scripted delay."""
        try:
            if request is None:
                raise _BadRequest("request body is not a JSON object")
            reply, body = fake._answer(self.path, request)
        except _BadRequest as e:
            return 400, error_body(400, str(e)), {}
        except _NotFound as e:
            return 404, error_body(404, str(e)), {}
        except Exception as e:  # e.g. a test's default_chat raised: answer, don't hang up
            return 500, error_body(500, f"FakeOpenAI failed: {e!r}"), {}
        fake._wait(reply.delay)
        return reply.status, body, reply.headers

    def _read_json(self) -> JSON | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _header_dict(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _send(self, status: int, body: JSON, headers: dict[str, str]) -> None:
        payload = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if self.protocol_version == "HTTP/1.0":
                self.send_header("Connection", "close")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. timed out); nothing left to tell it

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr line."""


class _KeepAliveHandler(_Handler):
    """HTTP/1.1: a connection serves requests until the client closes it."""

    protocol_version = "HTTP/1.1"
