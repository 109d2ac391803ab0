"""One error envelope for every error: ``{"error": {"code": ..., "message": ...}}``.

A client never sees a traceback. Bad input is a 4xx whose message says what to
fix; a failure of the server itself is a 5xx whose message says only that, and
the traceback goes to the server's log under the same request id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from koboi.errors import KoboiError
from koboi.logs import get_logger

log = get_logger("koboi.server")

#: Codes for the statuses the framework itself produces (routing, methods).
_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(KoboiError):
    """An error answered to the client with ``status`` and the envelope.

    ``headers`` are added to the response (``Retry-After``, ``WWW-Authenticate``);
    ``extra`` fields go into the ``error`` object beside ``code`` and ``message``.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return envelope(self.code, self.message, **self.extra)


def envelope(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON body of an error."""
    return {"error": {"code": code, "message": message, **extra}}


def code_for_status(status: int) -> str:
    return _STATUS_CODES.get(status, "internal_error" if status >= 500 else "error")


def not_found(what: str, ident: str) -> ApiError:
    """The same answer whether the object does not exist or belongs to someone else."""
    return ApiError(404, "not_found", f"no {what} {ident!r}")


def unauthorized(message: str, *, invalid_token: bool = False) -> ApiError:
    challenge = 'Bearer realm="koboi"'
    if invalid_token:
        challenge += ', error="invalid_token"'
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": challenge})


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


#: The JSON body of an error answered on a path: ``(path, error) -> body``. koboi's envelope
#: by default; an extension's own shape on its routes (``ServerExtension.error_body``).
ErrorBody = Callable[[str, ApiError], dict[str, Any]]


def koboi_body(path: str, error: ApiError) -> dict[str, Any]:
    """koboi's envelope, whatever the path."""
    return error.body()


async def send_error(send: Any, error: ApiError, body: dict[str, Any] | None = None) -> None:
    """Send ``error`` (as ``body``, by default its envelope) as a complete response from plain
    ASGI code (middleware)."""
    encoded = json.dumps(error.body() if body is None else body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(encoded)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()),
    ]
    if error.status in (413, 401):
        # The body may be unread: do not keep the connection for a next request.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": encoded})


def describe_validation(errors: list[Any]) -> str:
    """One readable line out of pydantic/FastAPI validation errors."""
    parts = []
    for item in errors[:10]:
        loc = [str(p) for p in item.get("loc", ()) if p != "body"]
        where = ".".join(loc) if loc else "body"
        kind = item.get("type", "")
        if kind == "json_invalid":
            detail = item.get("ctx", {}).get("error", "")
            parts.append(f"the body is not valid JSON{': ' + str(detail) if detail else ''}")
            continue
        if kind == "missing" and not loc:
            parts.append("a JSON body is required")
            continue
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    if len(errors) > 10:
        parts.append(f"... and {len(errors) - 10} more")
    return "; ".join(parts) or "invalid request"
