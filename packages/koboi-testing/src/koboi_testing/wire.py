"""A real HTTP/1.1 server on 127.0.0.1 that answers exactly what a test scripts.

Provider plugins are tested against their API's wire format, byte for byte,
not against mocked functions. ``WireServer`` runs an asyncio server in a
background thread (so it serves whatever event loop, or none, the test uses)
and answers each request with the next scripted :class:`Reply`:

.. code-block:: python

    with WireServer() as server:
        server.push(Reply.json({"id": "x", ...}))
        server.push(Reply.sse([{"choices": [...]}, "[DONE]"], chunk_size=7))
        server.push(Reply.json({"error": {...}}, status=429, headers={"retry-after": "1"}))
        provider = make_provider(base_url=server.url)
        ...
        assert server.requests[0].json()["model"] == "gpt-4o"

A reply can be cut into chunks of any size (to split multi-byte UTF-8 or SSE
lines across network reads), pause between chunks, hang before or during
the body, or drop the connection after some chunks. Replies not scripted are
answered by ``default`` (or ``handler``, a function of the request), else 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


@dataclass
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What to answer one request with.

    ``chunks`` is the body, sent piece by piece (with ``Transfer-Encoding:
    chunked`` unless ``content_length`` is set); ``delay`` pauses before each
    chunk; ``hang_before`` pauses before the status line; ``drop_after``
    closes the connection abruptly after that many chunks; ``stall_after``
    pauses ``stall_seconds`` once, after that many chunks (a stream that goes
    quiet midway).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Sequence[bytes] = ()
    delay: float = 0.0
    hang_before: float = 0.0
    drop_after: int | None = None
    content_length: bool = True
    stall_after: int | None = None
    stall_seconds: float = 0.0

    @classmethod
    def json(
        cls, body: Any, *, status: int = 200, headers: dict[str, str] | None = None, **kw: Any
    ) -> Reply:
        data = json.dumps(body).encode()
        return cls(
            status=status,
            headers={"content-type": "application/json", **(headers or {})},
            chunks=[data],
            **kw,
        )

    @classmethod
    def raw(
        cls,
        body: bytes | str,
        *,
        status: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        **kw: Any,
    ) -> Reply:
        data = body.encode() if isinstance(body, str) else body
        return cls(
            status=status,
            headers={"content-type": content_type, **(headers or {})},
            chunks=[data],
            **kw,
        )

    @classmethod
    def sse(
        cls,
        events: Iterable[Any],
        *,
        chunk_size: int | None = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        line_end: str = "\n",
        **kw: Any,
    ) -> Reply:
        """A ``text/event-stream`` reply.

        Each item of ``events`` is a string (sent as ``data:``), a dict (sent
        as JSON ``data:``), or a ``(event_name, data)`` pair; ``b"..."`` items
        are sent verbatim (comments, malformed framing). With ``chunk_size``
        the whole body is cut into pieces of that many bytes, regardless of
        event and character boundaries; without it, one chunk per event.
        """
        pieces = [sse_frame(e, line_end=line_end) for e in events]
        if chunk_size is not None:
            body = b"".join(pieces)
            pieces = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)]
        return cls(
            status=status,
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                **(headers or {}),
            },
            chunks=pieces,
            content_length=False,
            **kw,
        )


def sse_frame(item: Any, *, line_end: str = "\n") -> bytes:
    """One event in SSE framing (see :meth:`Reply.sse` for the forms of ``item``)."""
    if isinstance(item, bytes):
        return item
    name = None
    if isinstance(item, tuple):
        name, item = item
    data = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
    lines = [f"event: {name}"] if name else []
    lines += [f"data: {line}" for line in data.split("\n")]
    return (line_end.join(lines) + line_end + line_end).encode()


class WireServer:
    """A scripted HTTP/1.1 server on 127.0.0.1; use it as a context manager."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.default: Reply | None = None
        self.handler: Callable[[Received], Reply] | None = None
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def push(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one."""
        with self._lock:
            self.replies.extend(replies)

    def _next(self, request: Received) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.popleft()
        if self.handler is not None:
            return self.handler(request)
        if self.default is not None:
            return self.default
        return Reply.json({"error": {"message": "no reply scripted"}}, status=500)

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> WireServer:
        self._thread = threading.Thread(target=self._run, name="koboi-wire-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the wire server did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            loop.run_forever()
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):  # shutting down: a task's end is not news
                loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            for writer in list(self._writers):
                writer.transport.abort()
            # Closing a transport finishes on the next loop iterations; run them, so no
            # socket is left for the garbage collector to complain about.
            for _ in range(3):
                loop.run_until_complete(asyncio.sleep(0))
            loop.run_until_complete(self._server.wait_closed())
        finally:
            loop.close()

    # -- HTTP ------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                reply = self._next(request)
                if not await self._write_reply(writer, reply):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):  # the peer may have gone first: nothing to do
                writer.close()
                await writer.wait_closed()
            self._writers.discard(writer)

    async def _read_request(self, reader: asyncio.StreamReader) -> Received | None:
        head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
        if not head:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = b""
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        return Received(method, path, headers, body)

    async def _write_reply(self, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        """Send ``reply``; False when the connection was dropped on purpose."""
        if reply.hang_before:
            await asyncio.sleep(reply.hang_before)
        reason = _REASONS.get(reply.status, "Status")
        head = [f"HTTP/1.1 {reply.status} {reason}"]
        headers = {k.lower(): v for k, v in reply.headers.items()}
        if reply.content_length and reply.drop_after is None:
            headers["content-length"] = str(sum(len(c) for c in reply.chunks))
        else:
            headers["transfer-encoding"] = "chunked"
        head += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        chunked = "transfer-encoding" in headers
        for index, chunk in enumerate(reply.chunks):
            if reply.drop_after is not None and index >= reply.drop_after:
                writer.transport.abort()
                return False
            if reply.stall_after is not None and index == reply.stall_after:
                await asyncio.sleep(reply.stall_seconds)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if not chunk:
                continue
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            await writer.drain()
        if reply.drop_after is not None:
            writer.transport.abort()
            return False
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
