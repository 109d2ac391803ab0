"""How koboi reaches an MCP server: the two transports, as the MCP SDK's ``Transport``.

- :func:`sandbox_stdio`: a stdio server is a long-lived process of the agent's
  sandbox (``Sandbox.open_process``), so the sandbox's confinement (restricted,
  hard isolation: no network) applies to it as to any tool's process. Its
  environment is the one the config names, never koboi's own. The SDK frames
  the messages (one JSON-RPC message per line); this module only moves them
  between the process's pipes and the session's streams.
- :func:`guarded_http_client`: the ``httpx2`` client the SDK's streamable HTTP
  transport sends with, whose every connection goes through koboi-http's SSRF
  guard and to the address it checked (no second resolution).
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio
import httpx2
import mcp_types
from anyio.abc import ByteReceiveStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from koboi.logs import get_logger
from koboi.secrets import mask_secrets
from koboi_confine.text import neutralise

if TYPE_CHECKING:
    from koboi.sandbox import SandboxProcess
    from koboi_http.guard import AddressPolicy
    from koboi_http.pinning import PinnedTarget

log = get_logger("koboi_mcp.transport")

#: How much of a stdio server's stderr is kept, to say why it stopped.
_STDERR_LINES = 20


@dataclass
class ProcessReport:
    """What is known of a stdio server's process: its exit, and its last stderr lines."""

    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_LINES))
    exited: anyio.Event = field(default_factory=anyio.Event)
    returncode: int | None = None
    #: The process was started (a failed start has no exit to wait for).
    started: bool = False

    def last_words(self) -> str:
        """The server's last stderr line, safe to show (secrets masked, controls removed)."""
        for line in reversed(self.stderr):
            if line.strip():
                return mask_secrets(neutralise(line.strip()))[:300]
        return ""


async def _read_lines(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    buffer = b""
    try:
        async for chunk in stream:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    if buffer:
        yield buffer


@contextlib.asynccontextmanager
async def sandbox_stdio(
    process: SandboxProcess, report: ProcessReport
) -> AsyncIterator[TransportStreams]:
    """The session streams of a stdio server started by the sandbox.

    When the server exits (or its stdout closes), the read stream ends, so every
    request in flight fails at once instead of waiting for its timeout;
    ``report`` then holds the exit code and the last stderr lines.
    """
    async with process:
        report.started = True
        to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](32)
        to_server, from_session = anyio.create_memory_object_stream[SessionMessage](32)
        stdout_closed, stderr_closed = anyio.Event(), anyio.Event()

        async def read_stdout() -> None:
            try:
                async with to_session:
                    async for line in _read_lines(process.stdout):
                        if not line.strip():
                            continue
                        try:
                            message: SessionMessage | Exception = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as exc:
                            message = exc
                        try:
                            await to_session.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
            finally:
                stdout_closed.set()
            await _settle(report, process, stderr_closed)

        async def write_stdin() -> None:
            async with from_session:
                try:
                    async for message in from_session:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send(data.encode() + b"\n")
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    await to_session.aclose()  # the session sees the end, not a hang

        async def read_stderr() -> None:
            try:
                stream = process.stderr
                if stream is not None:
                    async for line in _read_lines(stream):
                        report.stderr.append(line.decode("utf-8", errors="replace"))
            finally:
                stderr_closed.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_stdout)
            tasks.start_soon(write_stdin)
            tasks.start_soon(read_stderr)
            try:
                yield from_server, to_server
            finally:
                if stdout_closed.is_set():
                    # The server went away by itself: let its last words and exit code
                    # arrive (briefly) before they are asked for.
                    with anyio.move_on_after(2.0, shield=True):
                        await report.exited.wait()
                tasks.cancel_scope.cancel()
                for stream in (from_server, to_server):
                    await stream.aclose()
    if not report.exited.is_set():
        report.exited.set()


async def _settle(
    report: ProcessReport, process: SandboxProcess, stderr_closed: anyio.Event
) -> None:
    """Once stdout closed: wait for stderr's end and the exit code, then say it exited."""
    with anyio.move_on_after(1.0):
        await stderr_closed.wait()
    report.returncode = await _exit_code(process)
    report.exited.set()


async def _exit_code(process: SandboxProcess) -> int | None:
    """The exit code once stdout closed (a server that closed stdout but lives is killed
    when the connection closes)."""
    with anyio.move_on_after(1.0):
        return await process.wait()
    return None


# -- HTTP ------------------------------------------------------------------------------------


class GuardedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to an address the SSRF guard checked for its host.

    A host is resolved and checked once per connection to the server (every
    address it resolves to must pass), and requests then go to that address:
    the URL carries the IP, ``Host`` the name, TLS SNI and verification use the
    name. A later DNS answer cannot move the connection somewhere unchecked.
    """

    def __init__(self, policy: AddressPolicy, *, inner: httpx2.AsyncBaseTransport | None = None):
        self._policy = policy
        self._inner = inner or httpx2.AsyncHTTPTransport(verify=tls_context(), retries=0)
        self._pins: dict[tuple[str, str, int | None], PinnedTarget] = {}
        self._lock = anyio.Lock()
        #: The last HTTP error status, with the URL that answered it (no query, no secret).
        self.last_refusal: str | None = None

    async def _pin(self, url: httpx2.URL) -> PinnedTarget:
        from koboi_http.pinning import pin

        key = (url.scheme, url.host, url.port)
        async with self._lock:
            found = self._pins.get(key)
            if found is None:
                # koboi_http.pinning reads only scheme, host and port of the URL, which
                # httpx2's URL spells as httpx's does.
                found = await pin(cast(Any, url), self._policy)
                self._pins[key] = found
        return found

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        from koboi_http.guard import literal_address

        target = await self._pin(request.url)
        address = target.addresses[0]
        original = request.url
        request.url = original.copy_with(host=str(address))
        if literal_address(target.host) is None:
            request.headers["Host"] = original.netloc.decode("ascii")
            if original.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": target.host}
        try:
            response = await self._inner.handle_async_request(request)
        finally:
            request.url = original  # what the SDK compares (same-origin redirects)
        if response.status_code >= 400:
            # The SDK turns a refused request into a generic error: keep what it was.
            self.last_refusal = f"HTTP {response.status_code} from {original.copy_with(query=None)}"
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every server: building one (loading the trusted certificates)
    takes a tenth of a second, more on a busy machine, and each restart would pay it."""
    return httpx2.create_ssl_context()


def address_policy(allow_private: bool) -> AddressPolicy:
    """Public addresses only, or (``allow_private``) any address but cloud metadata."""
    from koboi_http.guard import AddressPolicy

    if allow_private:
        return AddressPolicy(allow_networks=("0.0.0.0/0", "::/0"))
    return AddressPolicy()


def guarded_http_client(
    *,
    allow_private: bool,
    headers: dict[str, str],
    timeout: float,
    auth: httpx2.Auth | None = None,
    transport: GuardedTransport | None = None,
) -> httpx2.AsyncClient:
    """The client the SDK's streamable HTTP transport uses for one server."""
    transport = transport or GuardedTransport(address_policy(allow_private))
    return httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        auth=auth,
        trust_env=False,  # a proxy from the environment would resolve the name itself
        follow_redirects=False,
        # The read timeout bounds a held-open response stream; each call has its own.
        timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
    )
