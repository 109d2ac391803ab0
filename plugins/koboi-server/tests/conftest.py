"""Fixtures: agent configs on SQLite in tmp_path, real servers, keys, and an SSE reader.

Two kinds of server, both real uvicorn on a 127.0.0.1 port:

- ``thread_server``: ``create_app`` under ``uvicorn.Server`` in a thread of the
  test process (fast; the lifespan, middleware and routes are the real ones);
- ``serve_process``: ``koboi serve CONFIG`` in a subprocess, for SIGTERM, SIGKILL
  and restarts.

Keys are made with :class:`koboi_server.KeyRing` on the config's SQLite store,
which the server reads (the same file).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from koboi_server import testing
from koboi_server.testing import ThreadServer, create_key, store_call

#: Tools, approvals (append_log is moderate: act mode asks) and streamed answers.
AGENT = """
    agent: {name: served, mode: act, approval_timeout_seconds: 120}
    llm:
      provider: scripted
      rules:
        - match: 'log (?P<line>[\\w-]+)'
          tool: append_log
          arguments: {line: "{line}"}
          reply: "logged: {result}"
        - match: '(?P<expr>-?\\(*\\d[\\d\\s+\\-*/().%^]*\\d\\)*)'
          tool: calculator
          arguments: {expression: "{expr}"}
          reply: "{expr} = {result}"
      fallback: "Ask me some arithmetic, please."
    tools: {builtin: [calculator, append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
"""

#: No approvals (yolo): append_log runs at once; KOBOI_DEMO_STEP_SECONDS makes it slow.
YOLO = """
    agent: {name: served, mode: yolo}
    llm:
      provider: scripted
      rules:
        - match: 'log (?P<line>[\\w-]+)'
          tool: append_log
          arguments: {line: "{line}"}
          reply: "logged: {result}"
      fallback: "Nothing to log."
    tools: {builtin: [append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
"""

FAST = {
    # These tests serve several principals (alice, bob) on passthrough: the operator's
    # opt-in. test_principals.py serves them without it.
    "shared_sandbox": True,
    "keepalive_seconds": 0.5,
    "key_recheck_seconds": 0.3,
    "poll_seconds": 0.1,
    "recovery_interval_seconds": 0.5,
    "drain_seconds": 3.0,
    "access_log": False,
}


@pytest.fixture(autouse=True)
def _isolated(koboi_clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """koboi-testing's clean environment; the demo tools without their step pause."""
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write an agent config into ``tmp_path`` (with ``extra`` YAML appended); return its path."""

    def write(text: str = AGENT, extra: str = "", name: str = "agent.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text) + textwrap.dedent(extra), encoding="utf-8")
        return path

    return write


@pytest.fixture
def config_path(write_config: Callable[..., Path]) -> Path:
    return write_config()


@pytest.fixture
def yolo_config(write_config: Callable[..., Path]) -> Callable[..., Path]:
    """``yolo_config(extra="")``: the YOLO agent (no approvals) written to yolo.yaml."""

    def write(extra: str = "") -> Path:
        return write_config(YOLO, extra=extra, name="yolo.yaml")

    return write


@pytest.fixture
def in_store(config_path: Path) -> Callable[..., Any]:
    """Run ``await work(store)`` on the config's store (a store of the test process)."""

    def call(work: Callable[[Any], Any], config: Path = config_path) -> Any:
        return store_call(config, work)

    return call


@pytest.fixture
def make_key(config_path: Path) -> Callable[..., str]:
    """Create an API key for a principal in the config's store; return the key text."""

    def make(principal: str = "alice", config: Path = config_path) -> str:
        return create_key(config, principal)

    return make


@pytest.fixture
def revoke_key(config_path: Path) -> Callable[..., None]:
    """Revoke a key (its text) in the config's store."""

    def revoke(token: str, config: Path = config_path) -> None:
        testing.revoke_key(config, token)

    return revoke


# -- PostgreSQL -----------------------------------------------------------------------------

POSTGRES_URL = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def pg_store_url() -> Iterator[str]:
    """A store URL on a schema of this test's own on the test server; dropped afterwards."""
    import psycopg

    conninfo = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1)
    schema = f"koboi_test_server_{uuid.uuid4().hex[:10]}"
    try:
        connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc}); start it, set "
            'KOBOI_TEST_POSTGRES_URL, or deselect these tests with -m "not postgres"'
        )
    with connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield f"{POSTGRES_URL}?options={quote(f'-csearch_path={schema}')}"
        finally:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


# -- servers -----------------------------------------------------------------------------


@pytest.fixture
def thread_server(config_path: Path) -> Iterator[Callable[..., ThreadServer]]:
    """Start ``create_app(config, settings=FAST | overrides, **kwargs)`` in a thread."""
    started: list[ThreadServer] = []

    def start(config: Path = config_path, **kwargs: Any) -> ThreadServer:
        from koboi_server import create_app

        overrides = {**FAST, **kwargs.pop("settings", {})}
        app = create_app(config, settings=overrides, **kwargs)
        server = ThreadServer(app, graceful_shutdown=10).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServeProcess:
    """``koboi serve`` in a subprocess."""

    config: Path
    port: int
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServeProcess:
        self.log_path = self.config.parent / f"serve-{time.monotonic_ns()}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOBOI_DEMO_PAUSE")}
        with self.log_path.open("w") as out:  # the child keeps its own descriptor
            self.proc = self._spawn(out, env)
        # A loaded machine takes 20 s and more to import and start it.
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"koboi serve exited at start:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"koboi serve did not start:\n{self.log()}")
            time.sleep(0.05)

    def _spawn(self, out: Any, env: dict[str, str]) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "koboi_cli", "serve", str(self.config)]
        command += ["--port", str(self.port), *self.args]
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=self.config.parent,
        )

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure
            self.proc.kill()
            self.proc.wait(10)
            raise


@pytest.fixture
def serve_process(config_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    started: list[ServeProcess] = []

    def start(config: Path = config_path, *args: str, port: int | None = None) -> ServeProcess:
        server = ServeProcess(config, port or free_port(), list(args)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(10)


# -- clients -----------------------------------------------------------------------------


@dataclass
class SSE:
    event: str
    data: dict[str, Any]
    id: int | None


def read_sse(response: httpx.Response) -> Iterator[SSE | str]:
    """Events of an SSE response as they arrive; comment lines come as plain strings."""
    name, data, ident = "message", [], None
    for line in response.iter_lines():
        if line == "":
            if data:
                yield SSE(name, json.loads("\n".join(data)), ident)
            name, data, ident = "message", [], None
        elif line.startswith(":"):
            yield line
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = int(value)


@pytest.fixture
def sse() -> Callable[[httpx.Response], Iterator[SSE | str]]:
    return read_sse


@pytest.fixture
def stream_until() -> Callable[..., list[SSE]]:
    """``stream_until(client, "POST", url, event, json=...)``: the events of a stream up to the
    first ``event`` (included), then the client disconnects."""

    def follow(c: httpx.Client, method: str, url: str, event: str, **kwargs: Any) -> list[SSE]:
        seen: list[SSE] = []
        with c.stream(method, url, **kwargs) as response:
            assert response.status_code == 200, response.read()
            for item in read_sse(response):
                if isinstance(item, SSE):
                    seen.append(item)
                    if item.event == event:
                        return seen
        raise AssertionError(f"the stream ended without a {event!r} event: {seen}")

    return follow


@pytest.fixture
def events_of() -> Callable[..., list[SSE]]:
    """Every SSE event of a stream (no comments) until it ends."""

    def collect(response: httpx.Response) -> list[SSE]:
        return [e for e in read_sse(response) if isinstance(e, SSE)]

    return collect


@pytest.fixture
def client() -> Iterator[Callable[..., httpx.Client]]:
    """``client(base_url, key=None)``: an httpx client with the key as a Bearer token."""
    made: list[httpx.Client] = []

    def make(base_url: str, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        c = httpx.Client(base_url=base_url, headers=headers, timeout=30)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


#: Modules whose tests start real servers or processes: slow, so they run once, in this
#: member's own nox session, not again in the combined one (see noxfile.py).
_SERVER_MODULES = frozenset(
    {
        "test_approvals",
        "test_chat",
        "test_example_client",
        "test_fuzz",
        "test_http",
        "test_idempotency",
        "test_jobs",
        "test_jobs_http",
        "test_jobs_input",
        "test_keys",
        "test_memory",
        "test_ownership",
        "test_pause_http",
        "test_recovery",
        "test_replicas",
        "test_restart",
        "test_docs_and_composition",
        "test_webhooks_delivery",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in _SERVER_MODULES and item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def asgi_server() -> Iterator[Callable[[Any], ThreadServer]]:
    """``asgi_server(app)``: any ASGI app (not only koboi's) served like ``thread_server``."""
    started: list[ThreadServer] = []

    def start(app: Any) -> ThreadServer:
        server = ThreadServer(app, graceful_shutdown=10).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


# -- webhook receivers -------------------------------------------------------------------------


class PostReceiver:
    """A loopback HTTP receiver that records the POSTs it is sent: (headers, body)."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received: list[tuple[dict[str, str], bytes]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[PostReceiver]:
    """A :class:`PostReceiver` (test_webhooks_delivery.py has a scripted one of its own)."""
    r = PostReceiver()
    yield r
    r.close()
