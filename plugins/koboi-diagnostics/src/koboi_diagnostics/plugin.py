"""koboi hooks of koboi-diagnostics: the ``diagnostics`` command (imported when it runs)."""

from __future__ import annotations

from koboi.hookspecs import RegisterCommand, hookimpl


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "diagnostics",
        "koboi_diagnostics.cli:diagnostics",
        help="Write a bug report archive (versions, masked config, sandbox, store, sessions).",
    )
