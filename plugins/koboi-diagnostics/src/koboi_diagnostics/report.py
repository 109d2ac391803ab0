"""What a diagnostics archive holds, gathered without running the agent.

Each part is a JSON (or text) file of the zip:

- ``versions.json``: koboi, Python, the platform, and every plugin (distribution,
  version, status, why it did not load);
- ``config.json``: the validated config, every section, with secrets masked (a
  ``SecretStr`` shows as ``**********``, any string shaped like a credential as ``***``);
- ``sandbox.json``: the configured sandbox's ``describe()``, and ``koboi sandbox check
  --json`` when a plugin offers that command;
- ``store.json``: the store's kind, its schema revision and sizes, when it says them
  (``schema_revision()``, ``statistics()``);
- ``sessions.json``: the last sessions: status, runs, steps, tokens, cost, and how their
  last run ended (no messages, no arguments, no outputs);
- ``environment.json``: the names (never the values) of the ``KOBOI_*`` and ``OTEL_*``
  variables set.

Nothing leaves unmasked: every string goes through the kernel's secret rules, and
then every secret value known here (the environment's secret variables, the config's
``SecretStr`` values) is replaced wherever it still appears, in every file.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr

from koboi.secrets import mask_secrets, secret_values

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.store import Store

MASK = "***"
#: Prefixes of the variables whose names (not values) the archive lists.
VARIABLE_PREFIXES = ("KOBOI_", "OTEL_")


def versions(host: PluginHost) -> dict[str, Any]:
    from koboi import __version__

    return {
        "koboi": __version__,
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "plugins": [
            {
                "id": p.id,
                "distribution": p.dist,
                "version": p.version,
                "status": p.status,
                "reason": p.reason,
                "builtin": p.builtin,
            }
            for p in host.plugins
        ],
    }


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, SecretStr):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def config_view(config: AgentConfig) -> dict[str, Any]:
    """Every section of the validated config, as JSON (``SecretStr`` values hidden)."""
    return {
        "source": str(config.source) if config.source else None,
        "config_hash": config.config_hash,
        "agent": _dump(config.agent),
        "llm": _dump(config.llm),
        "llm_options": _dump(config.llm_options),
        "providers": _dump(config.providers),
        "provider_options": _dump(config.provider_options),
        "tools": _dump(config.tools),
        "store": _dump(config.store),
        "sandbox": _dump(config.sandbox),
        "sandbox_options": _dump(config.sandbox_options),
        "cache": _dump(config.cache),
        "runner": config.runner_name,
        "sections": {name: _dump(model) for name, model in config.sections.items()},
    }


def config_secrets(config: AgentConfig) -> list[str]:
    """The ``SecretStr`` values anywhere in the validated config's models."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            found.append(value.get_secret_value())
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for part in (
        config.llm,
        config.llm_options,
        config.providers,
        config.provider_options,
        config.store,
        config.sandbox_options,
        config.sections,
    ):
        walk(part)
    return [v for v in found if v]


def sandbox_check(config_path: Path, host: PluginHost) -> Any:
    """``koboi sandbox check --json --config CONFIG``, when a plugin offers the command."""
    if "sandbox" not in host.catalog().commands:
        return None
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "sandbox",
            "check",
            "--json",
            "--config",
            str(config_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        return {"exit_code": done.returncode, "check": json.loads(done.stdout)}
    except ValueError:
        return {
            "exit_code": done.returncode,
            "output": done.stdout[-4000:],
            "error": done.stderr[-4000:],
        }


async def store_view(store: Store, url: str) -> dict[str, Any]:
    view: dict[str, Any] = {"store": getattr(store, "name", type(store).__name__), "url": url}
    for method in ("schema_revision", "statistics"):
        asked = getattr(store, method, None)
        if callable(asked):
            try:
                view[method] = await asked()
            except Exception as exc:  # a report is still worth having without it
                view[method] = {"error": f"{type(exc).__name__}: {exc}"}
    from koboi.store import capabilities_of

    view["capabilities"] = sorted(capabilities_of(store))
    return view


async def sessions_view(store: Store, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` sessions: what they used and how their last run ended."""
    from koboi import journal as J

    rows = []
    for info in await store.list_sessions(limit=limit):
        events = await store.read(info.id)
        totals = info.totals or J.totals_of(events)
        ended = next((e for e in reversed(events) if e.type == J.RUN_FINISHED), None)
        last: dict[str, Any] | None = None
        if ended is not None:
            data = J.RUN_FINISHED.of(ended)
            last = {
                "outcome": data["outcome"],
                "steps": data["steps"],
                "error": data["error"],
                "refused_by": data.get("refused_by"),
            }
        rows.append(
            {
                "id": info.id,
                "status": info.status,
                "agent": info.config_name,
                "created_at": info.created_at,
                "updated_at": info.updated_at,
                "events": info.last_seq,
                "runs": totals.runs,
                "model_calls": totals.model_calls,
                "input_tokens": totals.input_tokens,
                "output_tokens": totals.output_tokens,
                "cost_usd": totals.cost_usd,
                "last_run": last,
                "event_types": sorted({e.type for e in events}),
            }
        )
    return rows


def environment_view() -> dict[str, Any]:
    return {
        "variables_set": sorted(k for k in os.environ if k.startswith(VARIABLE_PREFIXES)),
        "executable": sys.executable,
        "cwd": os.getcwd(),
    }


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` masked by the kernel's rules, then with every known secret value replaced."""
    masked = mask_secrets(text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 4:
            masked = masked.replace(secret, MASK)
    return masked


def scrub_data(value: Any, secrets: list[str]) -> Any:
    """JSON-like ``value`` with every string (keys too) passed through :func:`scrub`."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, Mapping):
        return {scrub(str(k), secrets): scrub_data(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_data(v, secrets) for v in value]
    return value


def known_secrets(config: AgentConfig | None) -> list[str]:
    found = secret_values(os.environ)
    if config is not None:
        found += config_secrets(config)
    return found
