"""Running the app under uvicorn: ``koboi serve``.

One process by default; ``--workers N`` starts N worker processes (uvicorn's
supervisor) that share the store. Before uvicorn starts, the agent is opened
once and closed (a preflight), so a config, store or tool problem is one
clear error line instead of a traceback from a worker.

SIGTERM (or Ctrl-C): uvicorn stops accepting connections; the app drains its
runs (see :mod:`koboi_server.runs`) within ``server.drain_seconds`` and exits
with status 0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from koboi.config import AgentConfig
    from koboi_server.settings import ServerSettings

CONFIG_ENV = "KOBOI_SERVER_CONFIG"
SETTINGS_ENV = "KOBOI_SERVER_SETTINGS"

log = logging.getLogger("koboi.server")


def worker_app() -> FastAPI:
    """The app of one worker process (``--workers N``): config and overrides from the env."""
    from koboi_cli.host import get_host
    from koboi_server.app import create_app

    _configure_logging(os.environ.get("KOBOI_SERVER_LOG_LEVEL", "info"))
    overrides = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    return create_app(os.environ[CONFIG_ENV], settings=overrides, host=get_host())


def serve(config_path: Path, overrides: Mapping[str, Any], *, log_level: str = "info") -> int:
    """Serve ``config_path`` until SIGTERM/SIGINT; return the exit status."""
    import uvicorn

    from koboi.config import load_config, resolve_store_url, store_scheme
    from koboi_cli.host import get_host
    from koboi_server.app import check_settings, create_app, load_settings

    _configure_logging(log_level)
    host = get_host()
    config = load_config(config_path, host.catalog())
    settings = load_settings(config, overrides)
    url = resolve_store_url(config, host.catalog())
    check_settings(settings, store_scheme(url))
    _preflight(config, settings, url)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": log_level,
        "access_log": settings.access_log,
        "lifespan": "on",
        # A backstop: the app ends its streams and parks its runs well before this.
        "timeout_graceful_shutdown": settings.drain_seconds + 5,
        "server_header": False,
    }
    if settings.workers > 1:
        os.environ[CONFIG_ENV] = str(config_path.resolve())
        os.environ[SETTINGS_ENV] = json.dumps(dict(overrides))
        os.environ["KOBOI_SERVER_LOG_LEVEL"] = log_level
        uvicorn.run(
            "koboi_server.serve:worker_app", factory=True, workers=settings.workers, **common
        )
        return 0
    app = create_app(config, settings=settings, host=host)
    server = uvicorn.Server(uvicorn.Config(app, **common))
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


def _preflight(config: AgentConfig, settings: ServerSettings, url: str) -> None:
    """Open the agent once (store, provider, sandbox, tools) and say what will be served."""
    import anyio

    from koboi.agent import KoboiAgent
    from koboi_cli.host import get_host
    from koboi_cli.redact import mask_secrets
    from koboi_server.keys import KeyRing

    async def check() -> int:
        agent = KoboiAgent(config, host=get_host())
        async with agent:
            keys = await KeyRing(agent.store).list()
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


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("koboi")
    if not any(getattr(h, "_koboi_server", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     koboi: %(message)s"))
        handler._koboi_server = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())
