"""Structured logs (``server.log_format: json``): one JSON object per line, with the
request id, the principal and the session of the request (or of the run) it concerns.

Every record passes the kernel's redacting filter (:class:`koboi.logs.RedactingFilter`)
on the handler itself, so a line from any logger (koboi's, uvicorn's access log, a
plugin's) is masked before it is written.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from koboi.logs import RedactingFilter
from koboi.tracing import current_run
from koboi_server.keys import Principal
from koboi_server.middleware import PRINCIPAL_KEY

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID_HEADER = "x-request-id"
#: A request id a client may choose (a proxy's): short, printable, no spaces.
_GIVEN_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class _Request:
    __slots__ = ("id", "scope")

    def __init__(self, request_id: str, scope: Scope) -> None:
        self.id, self.scope = request_id, scope


_current: ContextVar[_Request | None] = ContextVar("koboi_server_request", default=None)


def request_context() -> dict[str, str]:
    """``request_id``, ``principal``, ``session_id`` (those known) of what runs here."""
    found: dict[str, str] = {}
    request = _current.get()
    if request is not None:
        found["request_id"] = request.id
        principal = request.scope.get(PRINCIPAL_KEY)
        if isinstance(principal, Principal):
            found["principal"] = principal.name
        params = request.scope.get("path_params") or {}
        session = params.get("session_id")
        if isinstance(session, str):
            found["session_id"] = session
    run = current_run()
    if run is not None:
        found["session_id"] = run.session_id
        if run.owner and "principal" not in found:
            found["principal"] = run.owner
        if run.trace is not None:
            found["trace_id"] = run.trace.trace_id
    return found


class RequestIds:
    """ASGI middleware: every request gets an id (the client's ``X-Request-ID`` when it is a
    sane one, else a new one), sent back in ``X-Request-ID`` and put on its log lines."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = ""
        for key, value in scope.get("headers", ()):
            if key.lower() == REQUEST_ID_HEADER.encode():
                given = value.decode("latin-1")
                break
        request_id = given if _GIVEN_ID.match(given) else uuid.uuid4().hex[:16]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    *message.get("headers", ()),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        token = _current.set(_Request(request_id, scope))
        try:
            await self.app(scope, receive, sending)
        finally:
            _current.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the request's context and
    the exception (already masked by the handler's filter)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(request_context())
        if record.exc_text:
            line["exception"] = record.exc_text
        elif record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


#: The loggers a JSON ``koboi serve`` writes: koboi's and uvicorn's.
LOGGERS = ("koboi", "koboi_http", "uvicorn", "uvicorn.error", "uvicorn.access")


def json_handler(stream: Any) -> logging.Handler:
    """A handler writing JSON lines to ``stream``, every record masked first."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    return handler
