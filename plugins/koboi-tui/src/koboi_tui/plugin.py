"""koboi hooks of koboi-tui (plugin id ``tui``). Imports nothing heavy: the command's
module (Textual, the agent) is imported only when ``koboi chat`` runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterCommand


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "chat",
        "koboi_tui.cli:app",
        help="Talk with an agent in an interactive terminal UI (or a line-mode REPL).",
    )
