"""What a connection to ``koboi serve`` may hold: head and body deadlines, an idle
timeout, a cap.

uvicorn alone leaves four ways for slow or idle clients to hold a server:

- its keep-alive timer is cancelled by the first byte that arrives, and nothing
  bounds the rest of the request head: a client that sends a header byte every
  second keeps its connection (and whatever it holds) forever, and a connection
  that never sends anything is never timed out at all;
- nothing bounds the body either: a client that announces a body and sends a
  byte of it now and then holds the connection, and the route waiting for it;
- ``limit_concurrency`` counts connections *and* tasks, and once over it answers
  503 to every request, also to those on connections already open;
- nothing else caps the connections a process keeps.

:class:`GuardedH11Protocol` is uvicorn's h11 protocol with the four rules of
:class:`ConnectionLimits`:

- **head deadline**: the request head (request line and headers) must have
  arrived ``header_timeout`` seconds after the connection opened, or after the
  first byte of a later request on a connection kept alive; otherwise the
  connection is answered 408 ``request_timeout`` (nothing, if the client sent
  nothing) and closed. Once the head is in, this deadline is over;
- **body deadline**: a request's whole body must have arrived ``body_timeout``
  seconds after its head did; otherwise the connection is answered 408
  ``request_timeout`` (unless a response has begun) and closed, and the route
  reading the body sees the client gone. Its size is bounded apart
  (``server.max_body_bytes``);
- **idle timeout**: a connection kept alive with no request in flight is closed
  ``idle_timeout`` seconds after its last response (uvicorn's keep-alive timer).
  A request in flight is never idle, however long it lasts: an SSE stream is not
  cut by it;
- **connection cap**: at most ``max_connections`` connections of this process are
  served at once. A connection beyond it is still read up to its request head
  (within the head deadline, :data:`REFUSED_HEAD_SECONDS` at most), answered 503
  ``too_many_connections`` with ``Retry-After`` and ``Connection: close``, and
  closed; the connections already served are not touched. A refused connection
  does not count against the cap.

The h11 protocol is used whatever else is installed (httptools would be picked by
uvicorn's ``auto``): these rules hook into its parsing. ``koboi serve`` passes the
limits in a :class:`LimitedConfig`, which uvicorn hands to every worker process
(``--workers``): each worker applies them to its own connections.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from koboi_server.errors import envelope

#: How long a connection beyond the cap gets to send the head its 503 answers.
REFUSED_HEAD_SECONDS = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    """The rules of :class:`GuardedH11Protocol` (seconds; ``None``: no cap)."""

    header_timeout: float = 10.0
    idle_timeout: float = 15.0
    max_connections: int | None = 512
    body_timeout: float = 30.0


class LimitedConfig(uvicorn.Config):
    """uvicorn's config, serving with :class:`GuardedH11Protocol` and ``limits``.

    Picklable (its class and the limits are importable), so ``--workers`` hands it to
    every worker process as uvicorn does its own config.
    """

    def __init__(self, app: Any, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, http=GuardedH11Protocol, **kwargs)
        self.connection_limits = limits


def _response(status: int, reason: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
        "connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


_REQUEST_TIMEOUT = _response(
    408,
    "Request Timeout",
    envelope(
        "request_timeout",
        "the request head (request line and headers) did not arrive in time "
        "(server.header_timeout_seconds)",
    ),
    {},
)
_BODY_TIMEOUT = _response(
    408,
    "Request Timeout",
    envelope(
        "request_timeout",
        "the request body did not arrive in time (server.body_timeout_seconds)",
    ),
    {},
)
_TOO_MANY_CONNECTIONS = json.dumps(
    envelope(
        "too_many_connections",
        "this server has as many connections open as it serves (server.max_connections); "
        "retry in a moment",
    )
).encode()


async def _refuse(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI app of a connection beyond the cap: 503, then the connection is closed."""
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(_TOO_MANY_CONNECTIONS)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _TOO_MANY_CONNECTIONS})


#: The connections each server (of this process) serves: those counted by the cap.
_served: weakref.WeakKeyDictionary[ServerState, set[GuardedH11Protocol]] = (
    weakref.WeakKeyDictionary()
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with head and body deadlines, an idle timeout and a
    connection cap."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: ConnectionLimits = getattr(config, "connection_limits", ConnectionLimits())
        self.refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._head_seconds = self.limits.header_timeout
        self._head_begun = False  # some bytes of the awaited head have arrived

    # -- the cap -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        served = _served.setdefault(self.server_state, set())
        cap = self.limits.max_connections
        if cap is not None and len(served) >= cap:
            # Read the head, answer 503 and close; the app never sees the request.
            self.refused = True
            self.app = _refuse
            self._head_seconds = min(self._head_seconds, REFUSED_HEAD_SECONDS)
        else:
            served.add(self)
        self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._release()  # the connection is another protocol's from now on
        super().handle_websocket_upgrade(event)

    def _release(self) -> None:
        self._cancel_head()
        self._cancel_body()
        served = _served.get(self.server_state)
        if served is not None:
            served.discard(self)

    # -- the head deadline ---------------------------------------------------------------

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head(self) -> None:
        self._cancel_head()
        self._head_timer = self.loop.call_later(self._head_seconds, self._head_timed_out)

    def _cancel_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun:  # a client that sent nothing gets nothing
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        waiting = self._waiting_for_head()
        if waiting and data:
            if self._head_timer is None:  # the first byte of a request on a kept-alive one
                self._arm_head()
            self._head_begun = True
        cycle = self.cycle
        super().data_received(data)  # also cancels uvicorn's keep-alive (idle) timer
        if waiting and self.cycle is not cycle:  # the head is in: a request is in flight
            self._cancel_head()
            self._head_begun = False
        self._watch_body()

    # -- the body deadline ---------------------------------------------------------------

    def _watch_body(self) -> None:
        """Arm the body deadline while a request's body is still coming; disarm after."""
        cycle = self.cycle
        coming = cycle is not None and cycle.more_body and not cycle.disconnected
        if coming and self._body_timer is None:
            self._body_timer = self.loop.call_later(
                self.limits.body_timeout, self._body_timed_out, cycle
            )
        elif not coming:
            self._cancel_body()

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self, cycle: Any) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.cycle is not cycle or not cycle.more_body:
            return
        if not cycle.response_started:
            self.transport.write(_BODY_TIMEOUT)
        # Closing tells the route that waits for the body the client is gone.
        self.transport.close()

    # -- the idle timeout ----------------------------------------------------------------

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()  # arms the keep-alive timer; runs a pipelined head
        if self.transport.is_closing() or self.cycle is not cycle:
            return  # closed, or a pipelined request is already in flight
        self._reset_idle_timer()
        if self.conn.trailing_data[0]:
            # Part of the next head is already here: the head deadline runs, not idleness.
            self._unset_keepalive_if_required()
            self._head_begun = True
            self._arm_head()

    def _reset_idle_timer(self) -> None:
        # uvicorn's timer takes whole seconds from its config: use ours (a float).
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.limits.idle_timeout, self.timeout_keep_alive_handler
            )
