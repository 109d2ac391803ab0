"""What the tests of koboi-server, and of a plugin that extends it, need to serve the real
app and reach its store: not used by the server itself, and imported by nothing else of it.

- :class:`ThreadServer`: an ASGI app (``create_app(...)``) served by uvicorn in a thread of
  the test process, on a 127.0.0.1 socket bound before it starts: lifespan, middleware
  and routes are the real ones, and the test can reach ``server.state``.
- :func:`store_call`: ``await work(store)`` on a config's store, opened by the test
  process (the same store the server reads).
- :func:`create_key` and :func:`revoke_key`: API keys in that store.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from koboi_server.keys import FULL_SCOPE, KeyRing

__all__ = ["ThreadServer", "create_key", "revoke_key", "store_call"]


class ThreadServer:
    """``app`` served by uvicorn in a daemon thread, on ``sock`` (default: a new socket
    bound to a free 127.0.0.1 port). :meth:`start` returns once uvicorn has started (the
    app's lifespan has run), or raises after ``start_timeout`` seconds."""

    def __init__(
        self,
        app: Any,
        sock: socket.socket | None = None,
        *,
        start_timeout: float = 60.0,
        graceful_shutdown: int = 5,
    ) -> None:
        import uvicorn

        self.app = app
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        config.timeout_graceful_shutdown = graceful_shutdown
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for its thread, close the socket; raise if it hangs."""
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
        if self.thread.is_alive():  # pragma: no cover - a hang is a failure
            raise RuntimeError("the test server did not stop")

    @property
    def state(self) -> Any:
        """The server's state (``app.state.koboi``): its store, registry, settings."""
        return self.app.state.koboi


def store_call(config: Path, work: Callable[[Any], Any]) -> Any:
    """``await work(store)`` on the store ``config`` names, opened (and closed) here."""
    from koboi.config import build_store, load_config, resolve_store_url
    from koboi.plugins import default_host

    catalog = default_host().catalog()
    loaded = load_config(config, catalog)
    store = build_store(resolve_store_url(loaded, catalog), loaded.base_dir, catalog)

    async def main() -> Any:
        async with store:
            return await work(store)

    return anyio.run(main)


def create_key(
    config: Path,
    principal: str = "alice",
    *,
    scopes: Sequence[str] = (FULL_SCOPE,),
    rate_per_minute: int | None = None,
    budget_usd: float | None = None,
) -> str:
    """A new API key of ``principal`` in the config's store; the key text."""

    async def create(store: Any) -> str:
        _, token = await KeyRing(store).create(
            principal, scopes=scopes, rate_per_minute=rate_per_minute, budget_usd=budget_usd
        )
        return token

    return str(store_call(config, create))


def revoke_key(config: Path, token: str) -> None:
    """Revoke the key whose text is ``token`` in the config's store."""

    async def revoke(store: Any) -> None:
        await KeyRing(store).revoke(token.split("_")[1])

    store_call(config, revoke)
