"""The HTTP surface on a real uvicorn: health, OpenAPI, keys on every /v1 route, the error
envelope, the body limit, bad JSON — and a positive control for each refusal."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from koboi.errors import KoboiError


def _is_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert "Traceback" not in response.text
    error: dict[str, Any] = body["error"]
    return error


def test_health_ready_and_openapi_need_no_key(thread_server: Any, client: Any) -> None:
    server = thread_server()
    c = client(server.base_url)
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz").json()
    assert ready["status"] == "ready" and ready["store"] == "sqlite"
    assert ready["schema_revision"]
    spec = c.get("/openapi.json").json()
    assert "/v1/chat" in spec["paths"] and "/v1/approvals/{approval_id}" in spec["paths"]
    # The documented 422 is the envelope, not FastAPI's default validation schema.
    chat_422 = spec["paths"]["/v1/chat"]["post"]["responses"]["422"]
    assert chat_422["content"]["application/json"]["schema"]["$ref"].endswith("ErrorEnvelope")


def test_keys_missing_malformed_unknown_and_revoked_get_401(
    thread_server: Any, client: Any, make_key: Any, revoke_key: Any
) -> None:
    server = thread_server()
    key = make_key("alice")
    anonymous = client(server.base_url)

    error = _is_envelope(anonymous.get("/v1/sessions"), 401, "unauthorized")
    assert "Authorization: Bearer" in error["message"]
    response = anonymous.get("/v1/sessions")
    assert response.headers["www-authenticate"].startswith("Bearer")

    for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer x y", "Token " + key, key):
        response = anonymous.get("/v1/sessions", headers={"Authorization": header})
        _is_envelope(response, 401, "unauthorized")
        assert 'error="invalid_token"' in response.headers["www-authenticate"]

    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    for token in (forged, "koboi_0123456789abcdef_" + "x" * 43, "nonsense"):
        response = anonymous.get("/v1/sessions", headers={"Authorization": f"Bearer {token}"})
        _is_envelope(response, 401, "unauthorized")

    # Positive control: the real key works, on the same route.
    assert client(server.base_url, key).get("/v1/sessions").status_code == 200

    revoke_key(key)
    _is_envelope(client(server.base_url, key).get("/v1/sessions"), 401, "unauthorized")


def test_unauthenticated_requests_learn_nothing_about_routes_or_bodies(
    thread_server: Any, client: Any
) -> None:
    server = thread_server()
    anonymous = client(server.base_url)
    # An unknown /v1 route, a bad body, a wrong method: all 401 before anything else.
    _is_envelope(anonymous.get("/v1/no-such-route"), 401, "unauthorized")
    _is_envelope(anonymous.post("/v1/chat", content=b"{not json"), 401, "unauthorized")
    _is_envelope(anonymous.delete("/v1/chat"), 401, "unauthorized")


def test_no_keys_at_all_fails_closed_unless_dev_mode(
    write_config: Callable[..., Path], thread_server: Any, client: Any
) -> None:
    closed = thread_server(write_config(name="closed.yaml"))
    _is_envelope(client(closed.base_url).get("/v1/sessions"), 401, "unauthorized")
    _is_envelope(
        client(closed.base_url).post("/v1/chat", json={"message": "2 + 2"}), 401, "unauthorized"
    )
    dev = thread_server(write_config(name="dev.yaml"), settings={"dev_no_auth": True})
    answer = client(dev.base_url).post("/v1/chat", json={"message": "What is 2 + 2?"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"] == "2 + 2 = 4"


def test_dev_mode_is_refused_on_a_public_address(write_config: Callable[..., Path]) -> None:
    from koboi_server import create_app

    with pytest.raises(KoboiError, match="dev_no_auth"):
        create_app(write_config(), settings={"dev_no_auth": True, "host": "0.0.0.0"})


def test_errors_are_one_envelope_and_never_a_5xx_for_bad_input(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())

    error = _is_envelope(
        c.post("/v1/chat", content=b'{"message": ', headers={"content-type": "application/json"}),
        422,
        "invalid_json",
    )
    assert "not valid JSON" in error["message"]
    error = _is_envelope(c.post("/v1/chat", json={"mesage": "hi"}), 422, "invalid_request")
    assert "message" in error["message"]
    _is_envelope(c.post("/v1/chat", json={"message": ""}), 422, "invalid_request")
    _is_envelope(c.post("/v1/chat", json=["a", "list"]), 422, "invalid_request")
    _is_envelope(c.post("/v1/chat", content=b"plain text"), 422, "invalid_request")
    _is_envelope(c.post("/v1/approvals/ap_x", json={"decision": "maybe"}), 422, "invalid_request")
    _is_envelope(c.get("/v1/sessions", params={"limit": "-3"}), 422, "invalid_request")
    _is_envelope(c.get("/v1/sessions", params={"status": "bogus"}), 422, "invalid_request")
    _is_envelope(c.get("/v1/nothing-here"), 404, "not_found")
    _is_envelope(c.get("/no-such-page"), 404, "not_found")
    _is_envelope(c.delete("/v1/chat"), 405, "method_not_allowed")
    _is_envelope(c.get("/v1/sessions/" + "x" * 300), 404, "not_found")
    _is_envelope(
        c.get("/v1/sessions/abc/events", headers={"Last-Event-ID": "abc"}), 404, "not_found"
    )
    # Positive control: a well-formed request on the same routes succeeds.
    assert c.post("/v1/chat", json={"message": "What is 1 + 1?"}).json()["output"] == "1 + 1 = 2"


def test_a_message_over_the_limit_is_refused(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server(settings={"max_message_chars": 50})
    c = client(server.base_url, make_key())
    error = _is_envelope(
        c.post("/v1/chat", json={"message": "2 + 2 " * 20}), 422, "invalid_request"
    )
    assert "max_message_chars" in error["message"]
    assert c.post("/v1/chat", json={"message": "What is 2 + 2?"}).status_code == 200


def test_a_body_over_the_limit_is_413_before_it_is_read(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server(settings={"max_body_bytes": 4096})
    key = make_key()
    c = client(server.base_url, key)
    big = json.dumps({"message": "x" * 10_000})
    _is_envelope(
        c.post("/v1/chat", content=big, headers={"content-type": "application/json"}),
        413,
        "body_too_large",
    )

    # Declared 10 MB, none of it sent: answered at once from Content-Length alone.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {key}\r\n".encode()
            + b"Content-Length: 10000000\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(4096):  # the server closes the connection after it
            answer += chunk
    text = answer.decode()
    assert text.startswith("HTTP/1.1 413"), text
    assert '"code": "body_too_large"' in text

    # A chunked body with no length is cut off as soon as it passes the limit.
    def chunks() -> Any:
        yield b'{"message": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    streamed = c.post("/v1/chat", content=chunks(), headers={"content-type": "application/json"})
    _is_envelope(streamed, 413, "body_too_large")

    # Positive control: a body under the limit goes through.
    assert c.post("/v1/chat", json={"message": "What is 3 + 3?"}).status_code == 200


def test_a_failing_store_is_a_503_not_a_traceback(
    thread_server: Any, client: Any, make_key: Any
) -> None:
    server = thread_server()
    c = client(server.base_url, make_key())
    assert c.get("/v1/sessions").status_code == 200
    store = server.state.store
    original = store.list_sessions

    async def broken(**kwargs: Any) -> Any:
        from koboi.errors import StoreError

        raise StoreError("disk I/O error")

    store.list_sessions = broken
    try:
        _is_envelope(c.get("/v1/sessions"), 503, "store_unavailable")
        _is_envelope(c.get("/readyz"), 503, "store_unavailable")
    finally:
        store.list_sessions = original
    assert c.get("/readyz").status_code == 200
