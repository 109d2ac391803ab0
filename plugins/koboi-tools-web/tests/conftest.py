"""Loopback test servers and a plugin host holding exactly this plugin and the scripted model.

Every server here listens on a loopback address of this machine; no test
sends traffic anywhere else. Tests that exercise refusals of non-loopback
targets (metadata, RFC 1918) use :class:`LoopbackOnlyTransport`, which
counts requests and refuses to forward any that is not for loopback, so even
a broken guard cannot make a test reach another address.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import koboi_scripted.plugin
import koboi_tools_web.plugin
from koboi import AgentConfig, PluginHost, validate_config
from koboi.sandbox import PassthroughSandbox
from koboi.tools import ToolContext
from koboi_testing.wire import WireServer

LISTENER_BODY = b"listener reached"


@pytest.fixture
def host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_tools_web.plugin, "tools-web", dist="koboi-tools-web")
    return host


def make_config(host: PluginHost, tools_web: dict[str, Any] | None = None) -> AgentConfig:
    raw: dict[str, Any] = {
        "llm": {"provider": "scripted"},
        "tools": {"builtin": ["web_fetch", "web_search"]},
    }
    if tools_web is not None:
        raw["tools_web"] = tools_web
    return validate_config(raw, host.catalog())


@pytest.fixture
def configure(host: PluginHost) -> Callable[..., AgentConfig]:
    """``configure(tools_web=None)``: an agent config validated by the kernel with our section."""
    return lambda tools_web=None: make_config(host, tools_web)


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        session_id="s", call_id="c", step=1, sandbox=PassthroughSandbox(workdir=tmp_path)
    )


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


class CountingListener:
    """A raw TCP listener that counts the connections it accepts.

    Each accepted connection gets a tiny HTTP answer (``listener reached``),
    so a fetch that is allowed through visibly arrives: the positive control
    of every "refused before any connection" test.
    """

    def __init__(self, address: str, port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.address = address
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self.hosts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            with conn:
                conn.settimeout(2)
                head = b""
                try:
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        data = conn.recv(4096)
                        if not data:
                            break
                        head += data
                    for line in head.split(b"\r\n")[1:]:
                        if line.lower().startswith(b"host:"):
                            self.hosts.append(line[5:].strip().decode("latin-1"))
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                        % (len(LISTENER_BODY), LISTENER_BODY)
                    )
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def listeners_on_one_port(*addresses: str) -> list[CountingListener]:
    """Counting listeners on the same free port of several loopback addresses."""
    for _ in range(50):
        first = CountingListener(addresses[0])
        others: list[CountingListener] = []
        try:
            for address in addresses[1:]:
                others.append(CountingListener(address, first.port))
        except OSError:
            for listener in [first, *others]:
                listener.close()
            continue
        return [first, *others]
    raise RuntimeError(f"no common free port on {addresses}")


@pytest.fixture
def listen() -> Iterator[Callable[..., CountingListener]]:
    """``listen(address, port=0)``: a counting listener, closed after the test."""
    made: list[CountingListener] = []

    def make(address: str, port: int = 0) -> CountingListener:
        made.append(CountingListener(address, port))
        return made[-1]

    yield make
    for listener in made:
        listener.close()


@pytest.fixture
def listener_body() -> str:
    return LISTENER_BODY.decode()


@pytest.fixture
def loopback_listeners() -> Iterator[tuple[CountingListener, CountingListener]]:
    """Listeners on 127.0.0.1 and [::1], same port: where every loopback spelling lands."""
    v4, v6 = listeners_on_one_port("127.0.0.1", "::1")
    yield v4, v6
    v4.close()
    v6.close()


class LoopbackOnlyTransport(httpx.AsyncBaseTransport):
    """Counts every request that reaches the transport; forwards only those for loopback."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._inner = httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not ipaddress.ip_address(request.url.host).is_loopback:
            raise httpx.ConnectError("test transport: not forwarding off loopback", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """The fetcher closes its client after each hop; keep the inner pool for the next."""

    async def really_close(self) -> None:
        await self._inner.aclose()


@pytest.fixture
async def loopback_transport() -> AsyncIterator[LoopbackOnlyTransport]:
    transport = LoopbackOnlyTransport()
    yield transport
    await transport.really_close()


class TLSServer:
    """A one-request-per-connection HTTPS server on 127.0.0.1 that records the SNI it got."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.server_names: list[str | None] = []
        self.hosts: list[str] = []
        self.certificate = cert

        def remember(_sock: Any, name: str | None, _ctx: Any) -> None:
            self.server_names.append(name)

        self.context.sni_callback = remember
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port: int = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            raw.settimeout(3)
            try:
                with self.context.wrap_socket(raw, server_side=True) as conn:
                    head = b""
                    while b"\r\n\r\n" not in head:
                        data = conn.recv(4096)
                        if not data:
                            break
                        head += data
                    for line in head.split(b"\r\n")[1:]:
                        if line.lower().startswith(b"host:"):
                            self.hosts.append(line[5:].strip().decode("latin-1"))
                    body = b"<html><title>TLS</title><p>over tls</p></html>"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
                    )
            except (OSError, ssl.SSLError):
                raw.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def tls_server() -> Iterator[Callable[[str, Path], TLSServer]]:
    """``tls_server(name, directory)``: an HTTPS server with a self-signed certificate for name."""
    made: list[TLSServer] = []

    def make(name: str, directory: Path) -> TLSServer:
        made.append(TLSServer(*self_signed(directory, name)))
        return made[-1]

    yield make
    for server in made:
        server.close()


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (made with the openssl command)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
            "-addext", f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
