"""koboi hooks of koboi-tools-shell. The tools' modules are imported only when an agent uses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.tools import Tool


def _run_shell(config: Any) -> Tool:
    from koboi_tools_shell.tools import make_run_shell

    return make_run_shell(config)


def _shell_status(config: Any) -> Tool:
    from koboi_tools_shell.tools import make_shell_status

    return make_shell_status(config)


def _shell_kill(config: Any) -> Tool:
    from koboi_tools_shell.tools import make_shell_kill

    return make_shell_kill(config)


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_tools_shell.settings import SECTION, ShellSettings

    register(
        SECTION,
        ShellSettings,
        description="Limits of run_shell, shell_status and shell_kill: output, timeouts, jobs.",
    )


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    register(
        "run_shell",
        _run_shell,
        description="Run a shell command in the session's working directory, through the "
        "sandbox; background=true starts a job.",
    )
    register(
        "shell_status",
        _shell_status,
        description="State, exit code and output so far of a background job.",
    )
    register(
        "shell_kill",
        _shell_kill,
        description="Kill a background job and every process it started.",
    )
