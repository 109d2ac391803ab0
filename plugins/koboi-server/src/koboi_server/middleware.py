"""Plain ASGI middleware: the body size limit and authentication.

Both run before any route reads the body, so an oversized request is answered
413 without being buffered, and a request without a valid key is answered 401
before anything else is looked at (no route, validation or existence oracle
for anonymous clients).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException

from koboi.errors import StoreError
from koboi_server.errors import ApiError, send_error, unauthorized
from koboi_server.keys import DEV_PRINCIPAL, KeyRing, Principal

log = logging.getLogger("koboi.server")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PRINCIPAL_KEY = "koboi.principal"
PROTECTED_PREFIX = "/v1"


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes (server.max_body_bytes)"


class BodyTooLarge(HTTPException):
    """Raised while a route reads a streamed body that passed the limit.

    An HTTPException, so that FastAPI's body parsing passes it on unchanged
    and the app's handler answers 413 with the envelope.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit), headers={"Connection": "close"})


class BodyLimitMiddleware:
    """Refuse bodies over ``limit`` bytes: by Content-Length at once, else while streaming.

    A streamed body (no Content-Length) is counted as the route reads it; the
    chunk that passes the limit raises :class:`BodyTooLarge` and nothing more is
    read.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await send_error(
                    send, ApiError(400, "bad_request", "Content-Length is not a number")
                )
                return
            if declared > self.limit:
                await send_error(send, ApiError(413, "body_too_large", _too_large(self.limit)))
                return
        limit = self.limit
        seen = 0

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


class AuthMiddleware:
    """Every request under ``/v1`` needs ``Authorization: Bearer <key>`` of an unrevoked key.

    With ``dev_no_auth``, a request without an Authorization header acts as the
    principal ``dev``; a request that sends a key still has it checked.
    """

    def __init__(self, app: ASGIApp, keys: Callable[[], KeyRing], *, dev_no_auth: bool) -> None:
        self.app = app
        self.keys = keys
        self.dev_no_auth = dev_no_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        try:
            principal = await authenticate(
                self.keys(), _header(scope, b"authorization"), dev_no_auth=self.dev_no_auth
            )
        except ApiError as error:
            await send_error(send, error)
            return
        except StoreError as exc:
            log.warning("cannot check an API key: %s", exc)
            await send_error(
                send,
                ApiError(
                    503,
                    "store_unavailable",
                    "the store is not reachable, so the key cannot be checked; try again",
                    headers={"Retry-After": "2"},
                ),
            )
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


async def authenticate(keys: KeyRing, header: str | None, *, dev_no_auth: bool) -> Principal:
    """The principal of an Authorization header value, or an ApiError 401."""
    if header is None or not header.strip():
        if dev_no_auth:
            return Principal(DEV_PRINCIPAL, None)
        raise unauthorized(
            "this route needs an API key: send 'Authorization: Bearer <key>' "
            "(make one with 'koboi keys create --config CONFIG')"
        )
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized(
            "malformed Authorization header: send 'Authorization: Bearer <key>'",
            invalid_token=True,
        )
    principal = await keys.verify(token.strip())
    if principal is None:
        raise unauthorized("the API key is not valid or was revoked", invalid_token=True)
    return principal


def _protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None
