"""``koboi diagnostics CONFIG -o file.zip``: a bug report archive with no secret in it.

Imported only when the command runs. Everything it can gather is gathered; a part that
fails (a config that does not validate, a store that does not answer, an agent that
does not open) is written as its error, masked, so a broken setup still gets a report.
"""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from koboi_cli.api import CliError, ConfigArgument, JsonOption, get_host, note, print_json

README = """koboi diagnostics archive

versions.json     koboi, Python, the platform, every plugin and its status
config.json       the validated config, secrets masked
sandbox.json      the sandbox's description and 'koboi sandbox check' (when installed)
store.json        the store, its schema revision and sizes
sessions.json     the last sessions: status, runs, tokens, cost, how they ended
environment.json  names of the KOBOI_* and OTEL_* variables set (no values)

Every string has been masked with koboi's secret rules and every known secret value
(secret environment variables, the config's secret settings) removed.
"""


def diagnostics(
    config: ConfigArgument,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="The zip file to write.", show_default=False),
    ],
    sessions: Annotated[
        int, typer.Option("--sessions", min=0, help="How many recent sessions to summarise.")
    ] = 20,
    as_json: JsonOption = False,
) -> None:
    """Write a bug report archive: versions, the config with secrets masked, the sandbox
    check, the store's schema and sizes, and the last sessions' summaries."""
    if output.exists() and output.is_dir():
        raise CliError(f"{output} is a directory; give the zip file's path with -o")
    parts = anyio.run(_gather, config, sessions)
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    if as_json:
        print_json({"archive": str(output), "files": sorted(parts)})
    else:
        note(f"wrote {output} ({', '.join(sorted(parts))}): look inside before you share it")


async def _gather(config_path: Path, limit: int) -> dict[str, str]:
    from koboi.config import AgentConfig, build_store, load_config, resolve_store
    from koboi_diagnostics import report

    host = get_host()
    catalog = host.catalog()
    data: dict[str, Any] = {"versions.json": report.versions(host)}
    config: AgentConfig | None = None
    try:
        config = load_config(config_path, catalog)
        data["config.json"] = report.config_view(config)
    except Exception as exc:  # a config that does not validate is what the report is for
        data["config.json"] = {"error": _one_line(exc)}
    if config is not None:
        data["sandbox.json"] = await _sandbox(config, config_path, host)
        url, base_dir = resolve_store(config, catalog)
        try:
            async with build_store(url, base_dir, catalog) as store:
                data["store.json"] = await report.store_view(store, url)
                data["sessions.json"] = await report.sessions_view(store, limit)
        except Exception as exc:  # a store that does not answer: said, not fatal
            data["store.json"] = {"url": url, "error": _one_line(exc)}
    data["environment.json"] = report.environment_view()
    data["environment.json"]["written_at"] = time.time()
    secrets = report.known_secrets(config)
    files = {
        name: json.dumps(report.scrub_data(value, secrets), indent=2, ensure_ascii=False)
        for name, value in data.items()
    }
    files["README.txt"] = README
    return files


async def _sandbox(config: Any, config_path: Path, host: Any) -> dict[str, Any]:
    from koboi.agent import KoboiAgent
    from koboi_diagnostics import report

    found: dict[str, Any] = {}
    try:
        async with KoboiAgent(config, host=host) as agent:
            found["describe"] = agent.sandbox.describe()
    except Exception as exc:  # the agent does not open: that is worth knowing too
        found["agent_open_error"] = _one_line(exc)
    found["check"] = await anyio.to_thread.run_sync(report.sandbox_check, config_path, host)
    return found


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:2000]
