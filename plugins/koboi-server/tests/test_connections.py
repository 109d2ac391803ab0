"""Slow and idle clients cannot hold ``koboi serve``: head and body deadlines, an idle
timeout and a connection cap, tested with raw sockets against the real command (one
process, and ``--workers 2``). Positive controls: a normal client, a head dripped within
the deadline, a quick head with a body slower than the head deadline but within the body
deadline, a long SSE stream, the connections already open.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from koboi_server.connections import ConnectionLimits
from koboi_server.serve import CONFIG_ENV
from koboi_server.settings import ServerSettings

pytestmark = pytest.mark.slow  # real koboi serve processes

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: koboi\r\n\r\n"


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


#: Every connection a test opened, closed after it.
_opened: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_connections() -> Any:
    yield
    while _opened:
        _opened.pop().close()


class Conn:
    """One raw TCP connection to the server, with just enough HTTP/1.1 to read answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        _opened.append(self.sock)
        self.opened = time.monotonic()
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> Response:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"closed before a response: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._fill(), "closed in the middle of a body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Response(int(status_line.split()[1]), headers, body)

    def get_health(self) -> Response:
        self.send(HEALTH)
        return self.response()

    def seconds_until_closed(self, limit: float = 15.0) -> float:
        """Wait for the server to close the connection; return when, from now."""
        start = time.monotonic()
        while self._fill():
            assert time.monotonic() - start < limit, "the server kept the connection"
        return time.monotonic() - start

    def drip(self, data: bytes, interval: float) -> tuple[float, bool]:
        """Send ``data`` a byte every ``interval`` seconds, stopping when the server answers
        or closes; return (seconds from the first byte, whether all was sent)."""
        start = time.monotonic()
        for i in range(len(data)):
            readable, _, _ = select.select([self.sock], [], [], interval if i else 0)
            if readable:
                return time.monotonic() - start, False
            try:
                self.sock.send(data[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start, False
        return time.monotonic() - start, True


def _server_section(**settings: Any) -> str:
    lines = "".join(f"  {name}: {value}\n" for name, value in settings.items())
    return "server:\n  access_log: false\n" + lines


@pytest.fixture
def serve(yolo_config: Callable[..., Path], serve_process: Any) -> Callable[..., Any]:
    """``serve(*args, **server_settings)``: koboi serve of the YOLO agent with those settings."""

    def start(*args: str, **settings: Any) -> Any:
        server = serve_process(yolo_config(_server_section(**settings)), *args)
        time.sleep(0.3)  # the start-up probes' connections are gone
        return server

    return start


def test_the_defaults_are_those_documented() -> None:
    settings = ServerSettings()
    assert settings.header_timeout_seconds == 10.0
    assert settings.idle_timeout_seconds == 15.0
    assert settings.max_connections == 512
    assert settings.body_timeout_seconds == 30.0
    assert ConnectionLimits() == ConnectionLimits(10.0, 15.0, 512, 30.0)
    for name in (
        "header_timeout_seconds",
        "body_timeout_seconds",
        "idle_timeout_seconds",
        "max_connections",
    ):
        assert ServerSettings.model_fields[name].description


def test_a_slowloris_client_is_cut_at_the_head_deadline(serve: Any) -> None:
    server = serve(header_timeout_seconds=2.0, idle_timeout_seconds=30.0)
    # Positive controls: a normal client, and a head dripped within the deadline.
    normal = Conn(server.port)
    assert normal.get_health().status == 200
    quick = Conn(server.port)
    took, sent = quick.drip(HEALTH, 0.02)
    assert sent and took < 2.0
    assert quick.response().status == 200

    # A head that never ends: one byte every 0.25 s is cut at 2 s, with a 408.
    slow = Conn(server.port)
    endless = b"GET /healthz HTTP/1.1\r\nHost: koboi\r\nX-Slow: " + b"a" * 200
    took, sent = slow.drip(endless, 0.25)
    assert not sent and 1.5 <= took <= 5.0, took
    timed_out = slow.response()
    assert timed_out.status == 408 and timed_out.headers["connection"] == "close"
    assert timed_out.json()["error"]["code"] == "request_timeout"
    assert slow.seconds_until_closed() < 2

    # A connection that sends nothing is closed at the deadline too, without an answer.
    silent = Conn(server.port)
    assert 1.5 <= silent.seconds_until_closed() <= 5.0
    assert silent.buffer == b""

    # On a connection kept alive, the next head has the same deadline from its first byte.
    kept = Conn(server.port)
    assert kept.get_health().status == 200
    took, sent = kept.drip(endless, 0.25)
    assert not sent and 1.5 <= took <= 5.0, took
    assert kept.response().status == 408

    # The normal client's connection is still served.
    assert normal.get_health().status == 200


def test_an_idle_keepalive_connection_is_closed_after_the_idle_timeout(serve: Any) -> None:
    server = serve(header_timeout_seconds=2.0, idle_timeout_seconds=1.0)
    idle = Conn(server.port)
    assert idle.get_health().status == 200
    closed_after = idle.seconds_until_closed()
    assert 0.7 <= closed_after <= 4.0, closed_after

    # A byte after the answer, then nothing (uvicorn alone stops timing the connection at
    # the first byte): it begins a head, which has its deadline.
    stray = Conn(server.port)
    assert stray.get_health().status == 200
    stray.send(b"G")
    closed_after = stray.seconds_until_closed()
    assert 1.5 <= closed_after <= 5.0, closed_after
    assert stray.response().status == 408

    # Positive control: requests closer together than the timeout keep the connection,
    # well past one timeout in all.
    busy = Conn(server.port)
    for _ in range(5):
        assert busy.get_health().status == 200
        time.sleep(0.5)
    assert time.monotonic() - busy.opened > 2.0
    assert busy.get_health().status == 200


def test_connections_beyond_the_cap_are_refused_and_the_open_ones_keep_working(
    serve: Any,
) -> None:
    server = serve(max_connections=3, idle_timeout_seconds=30, header_timeout_seconds=5)
    served = [Conn(server.port) for _ in range(3)]
    for conn in served:
        assert conn.get_health().status == 200

    for _ in range(2):
        extra = Conn(server.port)
        refused = extra.get_health()
        assert refused.status == 503, refused
        assert refused.json()["error"]["code"] == "too_many_connections"
        assert refused.headers["connection"] == "close" and int(refused.headers["retry-after"]) > 0
        assert extra.seconds_until_closed() < 2

    # The connections already served keep working, several requests each.
    for _ in range(2):
        for conn in served:
            assert conn.get_health().status == 200

    # A closed connection frees its place.
    served.pop().close()
    time.sleep(0.3)
    again = Conn(server.port)
    assert again.get_health().status == 200
    assert Conn(server.port).get_health().status == 503


def _post_head(conn: Conn, key: str, length: int) -> None:
    conn.send(
        b"POST /v1/chat HTTP/1.1\r\nHost: koboi\r\n"
        + f"Authorization: Bearer {key}\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode()
    )


def test_a_quick_head_with_a_slow_body_is_served(serve: Any, make_key: Any) -> None:
    server = serve(header_timeout_seconds=1.0, idle_timeout_seconds=1.0, body_timeout_seconds=6)
    key = make_key(config=server.config)
    body = json.dumps({"message": "hello, slowly"}).encode()
    conn = Conn(server.port)
    _post_head(conn, key, len(body))
    took, sent = conn.drip(body, 2.5 / len(body))  # 2.5 s: past the head and idle timeouts
    assert sent and took > 2.0
    answer = conn.response()
    assert answer.status == 200, answer.body
    assert answer.json()["status"] == "finished"


def test_a_body_that_never_ends_is_cut_at_the_body_deadline(serve: Any, make_key: Any) -> None:
    # A slowloris of the body: a quick head announcing 4 KiB, then a byte every 0.25 s.
    server = serve(header_timeout_seconds=5.0, idle_timeout_seconds=30, body_timeout_seconds=2)
    key = make_key(config=server.config)
    slow = Conn(server.port)
    _post_head(slow, key, 4096)
    took, sent = slow.drip(b'{"message": "' + b"a" * 4000, 0.25)
    assert not sent and 1.5 <= took <= 5.0, took
    timed_out = slow.response()
    assert timed_out.status == 408 and timed_out.headers["connection"] == "close"
    assert timed_out.json()["error"]["code"] == "request_timeout"
    assert "body_timeout_seconds" in timed_out.json()["error"]["message"]
    assert slow.seconds_until_closed() < 2
    # Positive control: the same request with its body sent at once is served, and a
    # connection kept alive after a bodied request is not cut by the body deadline.
    body = json.dumps({"message": "hello"}).encode()
    quick = Conn(server.port)
    for _ in range(2):
        _post_head(quick, key, len(body))
        quick.send(body)
        answer = quick.response()
        assert answer.status == 200 and answer.json()["status"] == "finished", answer.body
        time.sleep(2.5)  # longer than the body deadline, between requests
    assert quick.get_health().status == 200


def test_a_long_sse_stream_is_not_cut_by_the_idle_timeout(
    write_config: Callable[..., Path],
    serve_process: Any,
    make_key: Any,
    sse: Any,
) -> None:
    # act mode: 'log x' waits for an approval, and its stream stays open meanwhile, silent
    # for longer than both timeouts between keepalive comments.
    settings = {"header_timeout_seconds": 1.0, "idle_timeout_seconds": 1.0}
    config = write_config(extra=_server_section(keepalive_seconds=2.5, **settings))
    server = serve_process(config)
    key = make_key(config=config)
    headers = {"Authorization": f"Bearer {key}"}
    seen: list[Any] = []
    approved_at: list[float] = []

    def approve_later(approval_id: str) -> None:
        time.sleep(4.0)
        approved_at.append(time.monotonic())
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=15) as c:
            answer = c.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
            assert answer.status_code == 200, answer.text

    with (
        httpx.Client(base_url=server.base_url, headers=headers, timeout=15) as c,
        c.stream("POST", "/v1/chat/stream", json={"message": "log long"}) as response,
    ):
        assert response.status_code == 200
        pending_at = 0.0
        for item in sse(response):
            seen.append(item)
            if getattr(item, "event", None) == "pending_approval":
                pending_at = time.monotonic()
                threading.Thread(
                    target=approve_later, args=(item.data["approval_id"],), daemon=True
                ).start()
            if getattr(item, "event", None) == "final":
                break
    events = [getattr(i, "event", i) for i in seen]
    assert events[-1] == "final", events
    assert approved_at and approved_at[0] - pending_at >= 3.5
    assert ": keepalive" in events  # the stream was silent for 2.5 s between comments


def test_the_limits_hold_in_every_worker_process(serve: Any) -> None:
    server = serve("--workers", "2", header_timeout_seconds=2.0, idle_timeout_seconds=1.0)
    endless = b"GET /healthz HTTP/1.1\r\nHost: koboi\r\nX-Slow: " + b"a" * 200
    results: list[tuple[float, bool]] = []

    def slowloris() -> None:
        results.append(Conn(server.port).drip(endless, 0.25))

    # Several at once, so that both workers get some.
    threads = [threading.Thread(target=slowloris) for _ in range(6)]
    for thread in threads:
        thread.start()
    normal = Conn(server.port)
    assert normal.get_health().status == 200  # positive control, while they drip
    assert 0.5 <= normal.seconds_until_closed() <= 4.0  # then idle: closed
    for thread in threads:
        thread.join(20)
    assert len(results) == 6
    for took, sent in results:
        assert not sent and 1.5 <= took <= 5.0, results


@pytest.mark.timeout(180)
def test_a_worker_process_makes_itself_non_dumpable(yolo_config: Callable[..., Path]) -> None:
    """``--workers`` spawns fresh interpreters, dumpable again: ``worker_app`` (what each
    worker runs) makes its process non-dumpable, as the ``koboi`` command does its own."""
    probe = (
        "import ctypes\n"
        "from koboi_server.serve import worker_app\n"
        "before = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "worker_app()\n"
        "print(before, ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"
    )
    env = {**os.environ, CONFIG_ENV: str(yolo_config())}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=170
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Control: the fresh interpreter was dumpable; worker_app made it not.
    assert done.stdout.split() == ["1", "0"], done.stdout
