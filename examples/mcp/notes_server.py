"""A small MCP server for the offline MCP demo (configs/mcp_demo.yaml) and the tests.

Written with the MCP SDK's high-level API (``MCPServer``), as a third party
would write one; it knows nothing of koboi. It keeps notes in a JSON file
(``NOTES_FILE``, default ``notes.json`` in its working directory), so what a
call did can be checked from outside — a test counts the calls that really
ran.

    python examples/mcp/notes_server.py            # stdio (what koboi starts)
    python examples/mcp/notes_server.py --http 8765 # streamable HTTP on 127.0.0.1
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("notes", instructions="Keeps short notes.")


def _file() -> Path:
    return Path(os.environ.get("NOTES_FILE", "notes.json"))


def _load() -> list[str]:
    try:
        return list(json.loads(_file().read_text()))
    except (OSError, ValueError):
        return []


def _save(notes: list[str]) -> None:
    _file().write_text(json.dumps(notes))


def _log_call(name: str) -> None:
    """One line per call that ran, for tests that count them (CALLS_FILE)."""
    calls = os.environ.get("CALLS_FILE")
    if calls:
        with open(calls, "a") as out:
            out.write(name + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> str:
    """Every note, one per line."""
    _log_call("list_notes")
    return "\n".join(_load()) or "no notes"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add_note(text: str) -> str:
    """Add a note.

    Args:
        text: What to note.
    """
    _log_call("add_note")
    notes = _load()
    notes.append(text)
    _save(notes)
    return f"noted ({len(notes)} notes)"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_notes() -> str:
    """Delete every note."""
    _log_call("delete_notes")
    _save([])
    return "all notes deleted"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environment(name: str) -> str:
    """Whether a variable is set in the server's environment (never its value).

    Args:
        name: The variable's name.
    """
    return "set" if name in os.environ else "not set"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def count_slowly(n: int, ctx: Context) -> str:
    """Count to n, reporting progress and logging each step.

    Args:
        n: Where to stop (at most 20).
    """
    for i in range(1, min(n, 20) + 1):
        await ctx.report_progress(i, n, f"at {i}")
        await ctx.info(f"counted {i}")
    return f"counted to {n}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def slow_write(text: str, seconds: float = 30.0) -> str:
    """Write a note after a pause (for tests that kill koboi mid-call).

    Args:
        text: What to note.
        seconds: How long to wait first.
    """
    _log_call("slow_write:start")
    release = os.environ.get("RELEASE_FILE")  # a test may let it finish early
    until = time.monotonic() + seconds
    while time.monotonic() < until and not (release and os.path.exists(release)):
        time.sleep(0.05)
    notes = _load()
    notes.append(text)
    _save(notes)
    _log_call("slow_write:end")
    return "written"


class Confirmation(BaseModel):
    confirm: bool = Field(description="Delete them?")


def ask_to_confirm() -> Elicit[Confirmation]:
    # The SDK asks the client in whichever way the protocol version allows.
    return Elicit("Delete every note?", Confirmation)


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def confirm_and_delete(
    answer: Annotated[ElicitationResult[Confirmation], Resolve(ask_to_confirm)],
) -> str:
    """Ask the user to confirm, then delete every note."""
    if answer.action == "accept" and answer.data.confirm:
        _save([])
        return "all notes deleted"
    return f"nothing deleted ({answer.action})"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def probe_network(port: int) -> str:
    """Try to open a TCP connection to 127.0.0.1:port (what a sandbox allows).

    Args:
        port: The port to connect to.
    """
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return "connected"
    except OSError as exc:
        return f"refused: {exc.__class__.__name__}: {exc}"


def shout(text: str) -> str:
    """Repeat the text in capitals.

    Args:
        text: What to shout.
    """
    return text.upper()


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def enable_shout(ctx: Context) -> str:
    """Add the shout tool to this server's tools."""
    server.add_tool(shout, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()  # 2026-07-28 clients listen for it
    with contextlib.suppress(Exception):  # earlier versions: on the session (if it can)
        await ctx.request_context.session.send_tool_list_changed()
    return "shout is available"


@server.resource("notes://all", mime_type="text/plain")
def all_notes() -> str:
    """Every note, as one text."""
    return "\n".join(_load())


@server.prompt()
def summarise(style: str = "short") -> str:
    """Ask for a summary of the notes.

    Args:
        style: short or long.
    """
    return f"Summarise these notes ({style}):\n" + "\n".join(_load())


if __name__ == "__main__":
    if os.environ.get("PID_FILE"):  # for tests that kill the server
        Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
