"""koboi hooks of koboi-tokens: the ``koboi tokens`` command (imported when invoked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterCommand


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "tokens",
        "koboi_tokens.cli:app",
        help="Count tokens as an agent's model does, and show its context window.",
    )
