"""``koboi chat CONFIG``: talk with an agent in a terminal UI, or line by line.

Imported only when the command runs (plugin.py names it by its import path).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from koboi_cli.api import CliError, ConfigArgument, get_host

SessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        "-s",
        help="Continue this session (an id, a unique prefix, or 'last'); a session whose "
        "last run was interrupted is finished first.",
        show_default=False,
    ),
]
NoTuiOption = Annotated[
    bool,
    typer.Option(
        "--no-tui",
        help="A line-mode REPL instead of the full-screen UI (the default when stdout is "
        "not a terminal).",
    ),
]

app = typer.Typer(add_completion=False, rich_markup_mode=None)


@app.command()
def chat(
    config: ConfigArgument, session: SessionOption = None, no_tui: NoTuiOption = False
) -> None:
    """Talk with the agent of CONFIG: streamed answers, tool calls as they happen, approvals
    answered inline, sessions kept in the store (resume any of them later)."""
    from koboi.config import load_config

    host = get_host()
    loaded = load_config(config, host.catalog())
    if no_tui or not _is_terminal():
        from koboi_tui.line import run_line_chat

        raise typer.Exit(run_line_chat(loaded, host, session))
    from koboi_tui.app import ChatApp

    shown = ChatApp(loaded, host, session=session)
    shown.run()
    if shown.fatal is not None:
        raise CliError(shown.fatal)


def _is_terminal() -> bool:
    """Both ends are a terminal that can draw (a dumb terminal gets the line mode)."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdout.isatty() and sys.stdin.isatty()
    except (ValueError, OSError):
        return False
