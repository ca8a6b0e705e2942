"""The fake OpenAI server itself: formats, scripts, error bodies, records, concurrency, stop."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

from tests.support.openai_server import DEFAULT_CHAT_CONTENT, FakeOpenAI, Reply
from tulip_memory.embeddings.hashing import HashingEmbedder


def post(
    server: FakeOpenAI, path: str, body: Any, *, raw: bytes | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST JSON to ``server.url + path``; (status, JSON body, lower-cased headers)."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path,
        data=data,
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), _headers(response.headers)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read()), _headers(e.headers)


def _headers(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def chat_body(text: str = "hi there") -> dict[str, Any]:
    return {"model": "fake-chat", "messages": [{"role": "user", "content": text}]}


# -- embeddings -----------------------------------------------------------------------------


def test_embeddings_response_format_and_deterministic_vectors(fake_openai: FakeOpenAI) -> None:
    status, body, _ = post(fake_openai, "/embeddings", {"model": "m", "input": ["a b", "c"]})

    assert status == 200
    assert body["object"] == "list"
    assert body["model"] == "m"
    assert set(body["usage"]) == {"prompt_tokens", "total_tokens"}
    assert [d["object"] for d in body["data"]] == ["embedding", "embedding"]
    assert [d["index"] for d in body["data"]] == [0, 1]
    vectors = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(vectors, HashingEmbedder(64).embed(["a b", "c"]))


def test_embeddings_accept_a_string_and_honour_dimensions(fake_openai: FakeOpenAI) -> None:
    _, body, _ = post(fake_openai, "/embeddings", {"model": "m", "input": "x", "dimensions": 8})

    assert len(body["data"]) == 1
    assert len(body["data"][0]["embedding"]) == 8


def test_constructor_sets_default_width() -> None:
    with FakeOpenAI(embedding_dim=12) as server:
        _, body, _ = post(server, "/embeddings", {"model": "m", "input": ["x"]})
    assert len(body["data"][0]["embedding"]) == 12


def test_embeddings_base64_encoding(fake_openai: FakeOpenAI) -> None:
    _, body, _ = post(
        fake_openai, "/embeddings", {"model": "m", "input": ["x y"], "encoding_format": "base64"}
    )

    decoded = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(decoded, fake_openai.embedding_vectors(["x y"])[0])


def test_embeddings_reject_token_arrays(fake_openai: FakeOpenAI) -> None:
    status, body, _ = post(fake_openai, "/embeddings", {"model": "m", "input": [[1, 2, 3]]})

    assert status == 400
    assert "input" in body["error"]["message"]


def test_scripted_embedding_error_then_normal_vectors(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Reply(status=503, content="overloaded"), Reply())

    first = post(fake_openai, "/embeddings", {"model": "m", "input": ["x"]})
    second = post(fake_openai, "/embeddings", {"model": "m", "input": ["x"]})

    assert first[0] == 503
    assert first[1]["error"]["message"] == "overloaded"
    assert second[0] == 200
    assert len(second[1]["data"][0]["embedding"]) == 64


# -- chat -------------------------------------------------------------------------------------


def test_chat_default_reply_format(fake_openai: FakeOpenAI) -> None:
    status, body, _ = post(fake_openai, "/chat/completions", chat_body("one two three"))

    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "fake-chat"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": DEFAULT_CHAT_CONTENT}
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["prompt_tokens"] == 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_script_is_fifo_then_default_chat(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply("first"), Reply("second"))
    fake_openai.script_chat(Reply("third"))
    fake_openai.default_chat = lambda request: Reply(f"echo {request['messages'][-1]['content']}")

    contents = [
        post(fake_openai, "/chat/completions", chat_body(f"q{i}"))[1]["choices"][0]["message"][
            "content"
        ]
        for i in range(4)
    ]

    assert contents == ["first", "second", "third", "echo q3"]


def test_error_reply_has_openai_error_body_and_headers(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply("slow down", status=429, headers={"Retry-After": "2"}))

    status, body, headers = post(fake_openai, "/chat/completions", chat_body())

    assert status == 429
    assert headers["retry-after"] == "2"
    assert body["error"]["message"] == "slow down"
    assert body["error"]["code"] == "rate_limit_exceeded"
    assert set(body["error"]) >= {"message", "type", "code"}


def test_server_error_without_content_gets_a_message(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(status=500))

    status, body, _ = post(fake_openai, "/chat/completions", chat_body())

    assert status == 500
    assert body["error"]["type"] == "server_error"
    assert body["error"]["message"]


def test_raw_body_override(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(body={"anything": [1, 2]}, status=418))

    status, body, _ = post(fake_openai, "/chat/completions", chat_body())

    assert (status, body) == (418, {"anything": [1, 2]})


def test_stream_requests_get_a_clear_400(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply("kept for the next request"))

    status, body, _ = post(fake_openai, "/chat/completions", {**chat_body(), "stream": True})
    _, after, _ = post(fake_openai, "/chat/completions", chat_body())

    assert status == 400
    assert "stream" in body["error"]["message"]
    assert after["choices"][0]["message"]["content"] == "kept for the next request"


def test_unknown_path_and_bad_json(fake_openai: FakeOpenAI) -> None:
    assert post(fake_openai, "/completions", {})[0] == 404
    assert post(fake_openai, "/chat/completions", None, raw=b"{not json")[0] == 400


def test_chat_through_litellm(fake_openai: FakeOpenAI) -> None:
    import litellm

    fake_openai.script_chat(Reply("scripted answer"))

    response = litellm.completion(
        model="openai/fake-chat",
        messages=[{"role": "user", "content": "hello"}],
        api_base=fake_openai.url,
        api_key="test",
    )

    assert response.choices[0].message.content == "scripted answer"
    assert response.usage.total_tokens > 0
    assert fake_openai.requests[-1].path == "/v1/chat/completions"


# -- records, counters, lifecycle -------------------------------------------------------------


def test_requests_are_recorded_with_json_and_headers(fake_openai: FakeOpenAI) -> None:
    post(fake_openai, "/chat/completions", chat_body("remember me"))

    (record,) = fake_openai.requests
    assert record.path == "/v1/chat/completions"
    assert record.json["messages"][0]["content"] == "remember me"
    assert record.headers["authorization"] == "Bearer sk-test"


def test_max_inflight_counts_concurrent_requests(fake_openai: FakeOpenAI) -> None:
    clients = 4
    fake_openai.script_embeddings(*[Reply(delay=0.5) for _ in range(clients)])
    start = threading.Barrier(clients)
    statuses: list[int] = []

    def call() -> None:
        start.wait()
        statuses.append(post(fake_openai, "/embeddings", {"model": "m", "input": ["x"]})[0])

    threads = [threading.Thread(target=call) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert statuses == [200] * clients
    assert fake_openai.max_inflight == clients
    assert fake_openai.inflight == 0


def test_reset_clears_scripts_records_and_counters(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply("scripted"))
    fake_openai.script_embeddings(Reply(status=500))
    post(fake_openai, "/chat/completions", chat_body())

    fake_openai.reset()

    assert fake_openai.requests == []
    assert fake_openai.max_inflight == 0
    assert post(fake_openai, "/embeddings", {"model": "m", "input": ["x"]})[0] == 200
    reply = post(fake_openai, "/chat/completions", chat_body())[1]
    assert reply["choices"][0]["message"]["content"] == DEFAULT_CHAT_CONTENT


def test_stop_cuts_delays_short_and_joins_every_thread() -> None:
    threads_before = set(threading.enumerate())
    server = FakeOpenAI().start()
    serving = server.thread
    server.script_chat(Reply("late", delay=60))
    results: list[int] = []
    client = threading.Thread(
        target=lambda: results.append(post(server, "/chat/completions", chat_body())[0])
    )
    client.start()
    while server.inflight == 0:
        threading.Event().wait(0.01)

    server.stop()
    client.join()

    assert results == [200]
    assert serving is not None and not serving.is_alive()
    assert not server.running
    assert set(threading.enumerate()) - threads_before == set()
    with pytest.raises(RuntimeError):
        _ = server.url


def test_start_stop_explicitly_and_stop_is_idempotent() -> None:
    server = FakeOpenAI()
    server.start()
    assert server.running
    assert server.url.startswith("http://127.0.0.1:")
    assert server.url.endswith("/v1")
    with pytest.raises(RuntimeError):
        server.start()
    server.stop()
    server.stop()
    assert not server.running


def test_failing_default_chat_answers_500(fake_openai: FakeOpenAI) -> None:
    def broken(request: dict[str, Any]) -> Reply:
        raise KeyError("no such thing")

    fake_openai.default_chat = broken

    status, body, _ = post(fake_openai, "/chat/completions", chat_body())

    assert status == 500
    assert "no such thing" in body["error"]["message"]


def test_keep_alive_serves_requests_on_one_connection_and_stops_with_it_open() -> None:
    """``keep_alive=True``: HTTP/1.1, several requests over one connection (as a real
    provider serves them), and stop() returns while the client still holds it idle."""
    import http.client

    fake = FakeOpenAI(keep_alive=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        ends = set()
        for _ in range(3):
            conn.request("POST", "/v1/chat/completions", body=json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ), headers={"Content-Type": "application/json"})  # fmt: skip
            response = conn.getresponse()
            assert response.status == 200 and response.getheader("Connection") != "close"
            json.loads(response.read())
            ends.add(conn.sock.getsockname() if conn.sock is not None else None)
        assert len(ends) == 1 and None not in ends  # one connection served all three
        stopper = threading.Thread(target=fake.stop)
        stopper.start()
        stopper.join(10)
        assert not stopper.is_alive() and not fake.running
    finally:
        conn.close()
        fake.stop()
