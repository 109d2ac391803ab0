"""Running the app under uvicorn: ``koboi serve``.

One process by default; ``--workers N`` starts N worker processes (uvicorn's
supervisor) that share the store. Before uvicorn starts, the agent is opened
once and closed (a preflight), so a config, store or tool problem is one
clear error line instead of a traceback from a worker.

Connections: a request head must arrive within ``server.header_timeout_seconds``, its
body within ``server.body_timeout_seconds`` after it,
a kept-alive connection without a request in flight is closed after
``server.idle_timeout_seconds``, and each process serves ``server.max_connections``
at once (see :mod:`koboi_server.connections`).

SIGTERM (or Ctrl-C): uvicorn stops accepting connections; the app drains its
runs (see :mod:`koboi_server.runs`) within ``server.drain_seconds`` and exits
with status 0.

Memory: once the server is listening, and again whenever requests have stopped
for a few seconds after a burst, the process collects garbage and hands the
heap pages it freed back to the OS (glibc ``malloc_trim``). Without that, the
memory freed by startup (config validation, the preflight, route building) and
by a load stays counted in the replica's RSS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi.logs import get_logger

if TYPE_CHECKING:
    import socket

    import uvicorn
    from fastapi import FastAPI

    from koboi.config import AgentConfig
    from koboi_server.connections import ConnectionLimits, LimitedConfig
    from koboi_server.settings import ServerSettings

CONFIG_ENV = "KOBOI_SERVER_CONFIG"
_PR_SET_DUMPABLE = 4
SETTINGS_ENV = "KOBOI_SERVER_SETTINGS"

log = get_logger("koboi.server")

#: Seconds without a new request after which the memory freed by a load is released.
QUIET_SECONDS = 3


def worker_app() -> FastAPI:
    """The app of one worker process (``--workers N``): config and overrides from the env.

    A worker is a fresh interpreter (uvicorn spawns it), so it is dumpable again whatever
    the ``koboi`` command made itself: it makes itself non-dumpable first, so a tool's
    process of the same user cannot read its memory or environment (API keys).
    """
    from koboi_cli.api import get_host
    from koboi_server.app import create_app

    make_undumpable()

    _configure_logging(
        os.environ.get("KOBOI_SERVER_LOG_LEVEL", "info"),
        os.environ.get("KOBOI_SERVER_LOG_FORMAT", "text"),
    )
    overrides = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    return create_app(os.environ[CONFIG_ENV], settings=overrides, host=get_host())


def make_undumpable() -> None:
    """Make this process non-dumpable (Linux ``PR_SET_DUMPABLE``: no ``/proc/<pid>/mem``,
    ``/proc/<pid>/environ`` or ptrace for processes of the same user)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
            log.warning("could not make koboi serve's worker non-dumpable")


def serve(config_path: Path, overrides: Mapping[str, Any], *, log_level: str = "info") -> int:
    """Serve ``config_path`` until SIGTERM/SIGINT; return the exit status."""
    from koboi.config import load_config, resolve_store_url, store_scheme
    from koboi_cli.api import get_host
    from koboi_server.app import check_settings, create_app, load_settings
    from koboi_server.connections import LimitedConfig

    _configure_logging(log_level)
    host = get_host()
    config = load_config(config_path, host.catalog())
    settings = load_settings(config, overrides)
    if settings.log_format == "json":
        _configure_logging(log_level, "json")
    url = resolve_store_url(config, host.catalog())
    check_settings(settings, store_scheme(url))
    _preflight(config, settings, url)
    limits = connection_limits(settings)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": log_level,
        "access_log": settings.access_log,
        "lifespan": "on",
        # A backstop: the app ends its streams and parks its runs well before this.
        "timeout_graceful_shutdown": settings.drain_seconds + 5,
        "server_header": False,
        # The connection protocol re-arms it with the exact (fractional) value.
        "timeout_keep_alive": max(1, math.ceil(settings.idle_timeout_seconds)),
    }
    if settings.log_format == "json":
        common["log_config"] = None  # uvicorn's loggers write through the JSON handler
    if settings.workers > 1:
        os.environ[CONFIG_ENV] = str(config_path.resolve())
        os.environ[SETTINGS_ENV] = json.dumps(dict(overrides))
        os.environ["KOBOI_SERVER_LOG_LEVEL"] = log_level
        os.environ["KOBOI_SERVER_LOG_FORMAT"] = settings.log_format
        _run_workers(
            LimitedConfig(
                "koboi_server.serve:worker_app",
                limits=limits,
                factory=True,
                workers=settings.workers,
                **common,
            )
        )
        return 0
    app = create_app(config, settings=settings, host=host)
    server = _memory_releasing_server(LimitedConfig(app, limits=limits, **common))
    # uvicorn re-raises the signal that stopped it once it is done, with the handler
    # found at start: make that a no-op, so a graceful stop exits with status 0.
    previous = {s: signal.signal(s, _ignore) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0 if server.started else 1


def _ignore(signum: int, frame: Any) -> None:
    return None


def connection_limits(settings: ServerSettings) -> ConnectionLimits:
    """The connection rules of ``settings`` (head and body deadlines, idle timeout, cap)."""
    from koboi_server.connections import ConnectionLimits

    return ConnectionLimits(
        header_timeout=settings.header_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        idle_timeout=settings.idle_timeout_seconds,
        max_connections=settings.max_connections,
    )


def _run_workers(config: LimitedConfig) -> None:
    """``--workers N``: what ``uvicorn.run`` does with workers, with our config.

    ``uvicorn.run`` builds its own ``Config``; the limits of the connections travel in
    ours, which each worker process receives (pickled) and serves with.
    """
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def release_free_memory(*, freeze: bool = False) -> None:
    """Collect garbage, then return the heap's free pages to the OS.

    ``freeze`` moves every object still alive into the permanent generation
    (:func:`gc.freeze`): after startup that is the modules, classes and
    settings that live as long as the process, so later collections (ours and
    the automatic ones during requests) no longer walk them.
    """
    gc.collect()
    if freeze:
        gc.freeze()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere (musl, macOS): then only gc runs."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_malloc_trim = _load_malloc_trim() if sys.platform.startswith("linux") else None


def _memory_releasing_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn's server, releasing free memory when ready and after each busy spell."""
    import uvicorn

    class Server(uvicorn.Server):
        _quiet_ticks = 0
        _requests_seen = 0

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # the app's lifespan has run: what is alive now stays
                release_free_memory(freeze=True)
                self._requests_seen = self.server_state.total_requests
                self._quiet_ticks = QUIET_SECONDS  # released just now

        async def on_tick(self, counter: int) -> bool:
            if counter % 10 == 0:  # once a second, as uvicorn's own housekeeping
                total = self.server_state.total_requests
                if total != self._requests_seen:
                    self._requests_seen, self._quiet_ticks = total, 0
                elif self._quiet_ticks < QUIET_SECONDS:
                    self._quiet_ticks += 1
                    if self._quiet_ticks == QUIET_SECONDS:  # once per quiet spell
                        release_free_memory()
            return await super().on_tick(counter)

    return Server(config)


def _preflight(config: AgentConfig, settings: ServerSettings, url: str) -> None:
    """Open the agent once (store, provider, sandbox, tools) and say what will be served.

    Refuses, in one line each, a store without what the server keeps (keyed records,
    a job queue), a configured webhook endpoint whose host resolves to an address
    the rules refuse, and keys of several principals on a sandbox that cannot keep
    their sessions apart (unless ``server.shared_sandbox``).
    """
    import anyio

    from koboi.agent import KoboiAgent
    from koboi_cli.api import get_host, mask_secrets
    from koboi_server.app import check_webhook_endpoints
    from koboi_server.keys import KeyRing
    from koboi_server.principals import PrincipalGate
    from koboi_server.state import store_capabilities

    async def check() -> int:
        agent = KoboiAgent(config, host=get_host())
        async with agent:
            store_capabilities(agent.store)
            await check_webhook_endpoints(
                settings.webhooks, settings.webhooks.dispatcher(agent.store)
            )
            ring = KeyRing(agent.store)
            await PrincipalGate(
                lambda: ring,
                sessions_isolated=agent.sandbox.isolates_sessions,
                shared_sandbox=settings.shared_sandbox,
                sandbox=agent.sandbox.name,
            ).check_start(announce=False)
            keys = await ring.list()
            return sum(1 for k in keys if not k.revoked)

    active_keys = anyio.run(check)
    log.info(
        "serving agent %r from %s; store %s; %d active API key(s)",
        config.agent.name,
        config.source or "(code)",
        mask_secrets(url),
        active_keys,
    )
    if active_keys == 0 and not settings.dev_no_auth:
        log.warning(
            "no API keys: every /v1 request is refused (401) until you create one: "
            "koboi keys create --config %s --principal NAME",
            config.source or "CONFIG",
        )


def _configure_logging(level: str, log_format: str = "text") -> None:
    if log_format == "json":
        from koboi_server.json_logs import LOGGERS, json_handler

        handler = json_handler(sys.stderr)
        for name in LOGGERS:
            named = logging.getLogger(name)
            named.handlers = [h for h in named.handlers if not getattr(h, "_koboi_server", False)]
            handler._koboi_server = True  # type: ignore[attr-defined]
            named.addHandler(handler)
            named.propagate = False
            named.setLevel(level.upper())
        return
    logger = logging.getLogger("koboi")
    if not any(getattr(h, "_koboi_server", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     koboi: %(message)s"))
        handler._koboi_server = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())
