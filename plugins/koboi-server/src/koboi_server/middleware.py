"""Plain ASGI middleware: the body size limit and authentication.

Both run before any route reads the body, so an oversized request is answered
413 without being buffered, and a request without a valid key is answered 401
before anything else is looked at (no route, validation or existence oracle
for anonymous clients).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException

from koboi.errors import StoreError
from koboi.logs import get_logger
from koboi_server.errors import ApiError, ErrorBody, koboi_body, send_error, unauthorized
from koboi_server.keys import DEV_PRINCIPAL, FULL_SCOPE, KeyRing, Principal

if TYPE_CHECKING:
    from koboi_server.principals import PrincipalGate

log = get_logger("koboi.server")

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

    def __init__(self, app: ASGIApp, limit: int, error_body: ErrorBody = koboi_body) -> None:
        self.app = app
        self.limit = limit
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None:
            refused: ApiError | None = None
            try:
                if int(length) > self.limit:
                    refused = ApiError(413, "body_too_large", _too_large(self.limit))
            except ValueError:
                refused = ApiError(400, "bad_request", "Content-Length is not a number")
            if refused is not None:
                await send_error(send, refused, self.error_body(scope.get("path", ""), refused))
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

    def __init__(
        self,
        app: ASGIApp,
        keys: Callable[[], KeyRing],
        *,
        dev_no_auth: bool,
        gate: Callable[[], PrincipalGate | None] = lambda: None,
        also_protected: frozenset[str] = frozenset(),
        scope_of: Callable[[str], str] = lambda path: FULL_SCOPE,
        error_body: ErrorBody = koboi_body,
    ) -> None:
        self.app = app
        self.keys = keys
        self.dev_no_auth = dev_no_auth
        #: Who may use the server at all (one principal on a sandbox that cannot keep
        #: sessions apart); None until the app has started.
        self.gate = gate
        #: Paths outside /v1 that need a key too (/metrics on the API's port).
        self.also_protected = also_protected
        #: The scope a path needs (koboi_server.keys: ``api`` unless an extension says).
        self.scope_of = scope_of
        #: The body of a refusal on a path (an extension may have its own shape).
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (_protected(path) or path in self.also_protected):
            await self.app(scope, receive, send)
            return
        try:
            principal = await authenticate(
                self.keys(), _header(scope, b"authorization"), dev_no_auth=self.dev_no_auth
            )
            gate = self.gate()
            refused = await gate.admit(principal) if gate is not None else None
            if refused is not None:
                raise refused
            check_scope(principal, self.scope_of(path))
            if principal.rate_per_minute is not None:
                await check_rate(self.keys(), principal, principal.rate_per_minute)
        except ApiError as error:
            await send_error(send, error, self.error_body(path, error))
            return
        except StoreError as exc:
            log.warning("cannot check an API key: %s", exc)
            unavailable = ApiError(
                503,
                "store_unavailable",
                "the store is not reachable, so the key cannot be checked; try again",
                headers={"Retry-After": "2"},
            )
            await send_error(send, unavailable, self.error_body(path, unavailable))
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


def check_scope(principal: Principal, required: str) -> None:
    """403 ``insufficient_scope`` unless the principal's key may call a route of ``required``."""
    if principal.allows(required):
        return
    raise ApiError(
        403,
        "insufficient_scope",
        f"this key may call only routes of scope {', '.join(principal.scopes)}; this route "
        f"needs scope {required!r}",
        headers={
            "WWW-Authenticate": f'Bearer realm="koboi", error="insufficient_scope", '
            f'scope="{required}"'
        },
    )


async def check_rate(keys: KeyRing, principal: Principal, limit: int) -> None:
    """429 ``rate_limited`` when the key made more than ``limit`` requests this minute.

    A counter per key and minute in the store's keyed records, so every replica
    counts against the same limit."""
    now = time.time()
    window = int(now // 60)
    used = await keys.records.counter_add(
        f"server.key_rate:{principal.key_id}:{window}", 1, expires_at=(window + 2) * 60.0
    )
    if used > limit:
        wait = max(1, int((window + 1) * 60 - now) + 1)
        raise ApiError(
            429,
            "rate_limited",
            f"this key may make {limit} requests a minute (its own rate limit); retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


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
