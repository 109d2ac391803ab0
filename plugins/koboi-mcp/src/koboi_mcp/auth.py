"""Authentication to an MCP server over HTTP: a bearer from the environment, or OAuth 2.

The OAuth flows are the MCP SDK's (``ClientCredentialsOAuthProvider``,
``OAuthClientProvider``: discovery from the server's protected resource
metadata, PKCE, dynamic client registration, refresh, a new token after a
401); what koboi adds is where their state lives — the store's keyed records,
so tokens outlive the process and are shared by every process using the store,
never in a log, the journal or an error message — and the person's side of
``koboi mcp login`` (a browser, a one-shot callback server on 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import webbrowser
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from koboi.errors import KoboiError
from koboi.store import KeyedRecords
from koboi_mcp.config import (
    AuthorizationCodeAuth,
    BearerAuth,
    ClientCredentialsAuth,
    ServerSettings,
)

if TYPE_CHECKING:
    from koboi.store import Store

#: The kind of keyed record OAuth state is kept under.
RECORD_KIND = "mcp.oauth"
FEATURE = "MCP OAuth tokens (mcp)"


class NotLoggedIn(KoboiError):
    """The server needs a person to log in first (``koboi mcp login NAME``)."""


def record_key(server: str, url: str) -> str:
    """Where a server's OAuth state is kept: its name and (a digest of) its URL, so a
    server moved to another URL logs in again instead of sending old tokens there."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return f"{server}:{digest}"


class StoreTokenStorage:
    """The SDK's ``TokenStorage`` over the store's keyed records (one record per server)."""

    def __init__(self, records: KeyedRecords, key: str) -> None:
        self._records = records
        self._key = key

    async def _read(self) -> dict[str, Any]:
        return await self._records.record_get(RECORD_KIND, self._key) or {}

    async def _write(self, field: str, value: dict[str, Any]) -> None:
        data = await self._read()
        data[field] = value
        if field == "tokens" and value.get("expires_in") is not None:
            data["tokens_saved_at"] = time.time()
        await self._records.record_put(RECORD_KIND, self._key, data)

    async def get_tokens(self) -> OAuthToken | None:
        data = await self._read()
        tokens = data.get("tokens")
        if not tokens:
            return None
        token = OAuthToken.model_validate(tokens)
        saved = data.get("tokens_saved_at")
        if token.expires_in is not None and isinstance(saved, int | float):
            # What is left of its lifetime: the SDK counts from when it read the token.
            token.expires_in = max(0, int(token.expires_in - (time.time() - saved)))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._write("tokens", tokens.model_dump(mode="json", exclude_none=True))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        info = (await self._read()).get("client")
        return OAuthClientInformationFull.model_validate(info) if info else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._write("client", client_info.model_dump(mode="json", exclude_none=True))

    async def has_tokens(self) -> bool:
        return bool((await self._read()).get("tokens"))

    async def forget(self) -> bool:
        return await self._records.record_delete(RECORD_KIND, self._key)


class PreRegistered(StoreTokenStorage):
    """A store's tokens, for a client registered beforehand (the config's client id):
    the SDK then never registers one."""

    def __init__(self, inner: StoreTokenStorage, client: OAuthClientInformationFull) -> None:
        super().__init__(inner._records, inner._key)
        self._client = client

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        return None  # the configured client stays the client


def storage_for(store: Store | None, server: str, url: str) -> StoreTokenStorage:
    """The token storage of ``server``: the store must keep keyed records."""
    from koboi.store import records_of

    if store is None:
        raise KoboiError(f"MCP server {server!r}: OAuth tokens need a store, and there is none")
    return StoreTokenStorage(records_of(store, FEATURE), record_key(server, url))


def bearer_headers(name: str, auth: BearerAuth) -> dict[str, str]:
    """The Authorization header of a static bearer (read now from the environment)."""
    token = os.environ.get(auth.token_env, "").strip()
    if not token:
        raise KoboiError(
            f"MCP server {name!r}: the environment variable {auth.token_env} (auth.token_env) "
            "is not set; set it to the server's token"
        )
    return {"Authorization": f"Bearer {token}"}


def _refuse_interaction(name: str) -> Callable[..., Awaitable[Any]]:
    async def refuse(*_: Any) -> Any:
        raise NotLoggedIn(
            f"MCP server {name!r} needs a person to log in: run 'koboi mcp login {name} "
            "--config CONFIG' once (the tokens are then kept in the store)"
        )

    return refuse


def oauth_provider(
    name: str,
    settings: ServerSettings,
    store: Store | None,
    *,
    redirect_handler: Callable[[str], Awaitable[None]] | None = None,
    callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
) -> httpx2.Auth | None:
    """The SDK's OAuth provider for ``settings.auth`` (None for none and bearer).

    For the authorization-code flow outside ``koboi mcp login`` nobody can log in:
    the handlers then raise :class:`NotLoggedIn`, which says what to run.
    """
    auth = settings.auth
    url = settings.url or ""
    if isinstance(auth, ClientCredentialsAuth):
        from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

        return ClientCredentialsOAuthProvider(
            server_url=url,
            storage=storage_for(store, name, url),
            client_id=auth.client_id,
            client_secret=auth.client_secret.get_secret_value(),
            token_endpoint_auth_method=auth.token_endpoint_auth_method,
            scope=auth.scope,
            issuer=auth.issuer,
        )
    if isinstance(auth, AuthorizationCodeAuth):
        storage: StoreTokenStorage = storage_for(store, name, url)
        redirect_uri = f"http://127.0.0.1:{auth.redirect_port}/callback"
        if auth.client_id is not None:
            secret = auth.client_secret.get_secret_value() if auth.client_secret else None
            storage = PreRegistered(
                storage,
                OAuthClientInformationFull(
                    client_id=auth.client_id,
                    client_secret=secret,
                    redirect_uris=[redirect_uri],  # type: ignore[list-item]
                    grant_types=["authorization_code", "refresh_token"],
                    token_endpoint_auth_method="client_secret_basic" if secret else "none",
                ),
            )
        return OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name=auth.client_name,
                redirect_uris=[redirect_uri],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=auth.scope,
                token_endpoint_auth_method="none",
            ),
            storage=storage,
            redirect_handler=redirect_handler or _refuse_interaction(name),
            callback_handler=callback_handler or _refuse_interaction(name),
        )
    return None


# -- the person's side of the authorization-code flow -----------------------------------------


async def open_in_browser(url: str) -> None:
    """Show the authorization URL and try a browser (a headless machine shows the line only)."""
    print(f"Open this URL to log in:\n  {url}", flush=True)
    await anyio.to_thread.run_sync(lambda: webbrowser.open(url, new=2))


class CallbackServer:
    """A one-shot HTTP server on 127.0.0.1 that receives the authorization code.

    It serves from the moment it is entered (a browser may come back before anyone
    waits), until it is left.
    """

    def __init__(self, port: int, *, timeout: float = 300.0) -> None:
        self.port = port
        self.timeout = timeout
        self._result: AuthorizationCodeResult | None = None
        self._received = anyio.Event()
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> CallbackServer:
        try:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        except OSError as exc:
            raise KoboiError(
                f"cannot listen on 127.0.0.1:{self.port} for the login callback ({exc}); set "
                "auth.redirect_port to a free port"
            ) from None
        await self._stack.enter_async_context(listener)
        tasks = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tasks.cancel_scope.cancel)
        tasks.start_soon(listener.serve, self._handle)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._stack.aclose()

    async def wait(self) -> AuthorizationCodeResult:
        """The code, once a request brought it (or an error, or nothing in time)."""
        with anyio.move_on_after(self.timeout):
            await self._received.wait()
        result, self._result = self._result, None
        self._received = anyio.Event()  # a second flow (a new server) waits for its own code
        if result is None:
            raise KoboiError(
                f"no authorization code within {self.timeout:.0f} s; run the login again"
            )
        return result

    async def _handle(self, stream: Any) -> None:
        async with stream:
            request = b""
            with anyio.move_on_after(10):
                while b"\r\n\r\n" not in request and len(request) < 65536:
                    request += await stream.receive()
            line = request.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            target = parts[1] if len(parts) > 1 else "/"
            query = parse_qs(urlsplit(target).query)
            code = query.get("code", [""])[0]
            error = query.get("error", [""])[0]
            if code:
                self._result = AuthorizationCodeResult(
                    code=code,
                    state=query.get("state", [None])[0],
                    iss=query.get("iss", [None])[0],
                )
                body = b"Logged in. You can close this window."
            elif error:
                body = b"The login failed: " + error.encode()[:200]
            else:
                body = b"Waiting for the authorization server's redirect."
            await stream.send(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            if code or error:
                self._received.set()


async def login(
    name: str,
    settings: ServerSettings,
    store: Store,
    *,
    open_url: Callable[[str], Awaitable[None]] = open_in_browser,
) -> int:
    """Log in to ``name`` (the authorization-code flow, or a client-credentials token) and
    keep the tokens in ``store``; the number of tools the server then offers.

    ``open_url`` shows the person the authorization URL (a browser by default); the
    code comes back to a one-shot server on 127.0.0.1 (``auth.redirect_port``).
    """
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from koboi_mcp._version import __version__
    from koboi_mcp.transport import guarded_http_client

    auth = settings.auth
    if not isinstance(auth, AuthorizationCodeAuth | ClientCredentialsAuth):
        raise KoboiError(
            f"MCP server {name!r} has no OAuth login (auth.type is {auth.type}); "
            "only authorization_code and client_credentials servers log in"
        )
    callback: CallbackServer | None = None
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(auth, AuthorizationCodeAuth):
            callback = await stack.enter_async_context(CallbackServer(auth.redirect_port))
        provider = oauth_provider(
            name,
            settings,
            store,
            redirect_handler=open_url,
            callback_handler=callback.wait if callback is not None else None,
        )
        http = await stack.enter_async_context(
            guarded_http_client(
                allow_private=settings.allow_private,
                headers=dict(settings.headers),
                timeout=settings.connect_timeout,
                auth=provider,
            )
        )
        client_info = types.Implementation(name="koboi", version=__version__)
        await _authorize(http, str(settings.url), client_info)
        async with Client(
            streamable_http_client(str(settings.url), http_client=http),
            cache=None,
            client_info=client_info,
        ) as client:
            tools = await client.list_tools()
    return len(tools.tools)


async def _authorize(http: httpx2.AsyncClient, url: str, client_info: Any) -> None:
    """Run the OAuth flow before the MCP handshake: the SDK bounds its first request
    (the version probe) by a short timeout that would include the whole flow (discovery,
    registration, the token requests), which a slow authorization server or a busy
    machine can exceed. The request is the probe a client sends first anyway."""
    from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY
    from mcp_types import PROTOCOL_VERSION_META_KEY as VERSION_KEY
    from mcp_types.version import LATEST_MODERN_VERSION

    probe = {
        "jsonrpc": "2.0",
        "id": "koboi-login",
        "method": "server/discover",
        "params": {
            "_meta": {
                VERSION_KEY: LATEST_MODERN_VERSION,
                CLIENT_INFO_META_KEY: client_info.model_dump(mode="json", exclude_none=True),
                CLIENT_CAPABILITIES_META_KEY: {},
            }
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        MCP_PROTOCOL_VERSION_HEADER: LATEST_MODERN_VERSION,
        MCP_METHOD_HEADER: "server/discover",
    }
    async with http.stream("POST", url, json=probe, headers=headers) as response:
        if response.status_code in (401, 403):
            raise KoboiError(f"the login was refused (HTTP {response.status_code} from {url})")


async def logout(name: str, settings: ServerSettings, store: Store) -> bool:
    """Forget ``name``'s tokens and registered client; True when there were some."""
    return await storage_for(store, name, settings.url or "").forget()
