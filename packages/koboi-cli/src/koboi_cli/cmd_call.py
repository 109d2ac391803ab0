"""``koboi call CONFIG TOOL --args JSON``: one governed tool call, no model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from koboi_cli import host
from koboi_cli.cmd_run import choose_approver, shorten
from koboi_cli.errors import CliError
from koboi_cli.redact import mask_secrets
from koboi_cli.style import Style, err, write


def parse_arguments(text: str) -> dict[str, object]:
    """``--args``: a JSON object, or a clear error saying what to fix."""
    from koboi.messages import duplicate_key, loads_json

    try:
        value = loads_json(text)
    except ValueError as exc:
        raise CliError(
            f"--args is not valid JSON ({exc}); give an object, e.g. '{{\"x\": 1}}'"
        ) from None
    if not isinstance(value, dict):
        raise CliError(f"--args must be a JSON object, not {type(value).__name__}")
    repeated = duplicate_key(value)
    if repeated is not None:
        raise CliError(f"--args names the key {repeated!r} more than once")
    return dict(value)


def call_tool(
    config: Path,
    tool_name: str,
    arguments: str,
    *,
    session_id: str | None,
    assume_yes: bool,
    as_json: bool,
) -> int:
    """Run the call; print its result (masked); return the exit code."""
    from koboi.agent import KoboiAgent
    from koboi.config import load_config

    parsed = parse_arguments(arguments)
    plugin_host = host.get_host()
    loaded = load_config(config, plugin_host.catalog())
    approver = choose_approver(assume_yes=assume_yes)
    agent = KoboiAgent(loaded, host=plugin_host, approver=approver)

    async def run() -> object:
        async with agent:
            return await agent.call_tool(tool_name, parsed, session_id=session_id)

    result = anyio.run(run)
    from koboi.agent import ToolCallResult

    assert isinstance(result, ToolCallResult)
    content = mask_secrets(result.content)
    if as_json:
        write(
            sys.stdout,
            json.dumps(
                {
                    "session_id": result.session_id,
                    "call_id": result.call_id,
                    "tool": result.name,
                    "outcome": result.outcome,
                    "refused_by": result.refused_by,
                    "is_error": result.is_error,
                    "content": content,
                },
                ensure_ascii=False,
            )
            + "\n",
        )
    else:
        style = Style(sys.stdout)
        if result.refused_by:
            write(
                sys.stdout, f"{style.yellow('refused by ' + result.refused_by + ':')} {content}\n"
            )
        else:
            write(sys.stdout, shorten(content, lines=40, chars=4000) + "\n")
    if result.ok:
        return 0
    err(f"call {result.outcome} (session {result.session_id})")
    return 1
