"""koboi hooks of koboi-tools-git: the ``tools_git`` config section and the four tools.

Each tool is registered with a factory, so that it is made with the agent's
``tools_git`` settings (the commit identity). Nothing is imported until used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_tools_git.settings import SECTION, ToolsGitSection

    register(SECTION, ToolsGitSection, description="Identity of the commits git_commit makes.")


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    from koboi_tools_git.tools import TOOLS

    for kind in TOOLS:
        register(kind.name, _factory(kind), description=kind.description)


def _factory(kind: Any) -> Callable[[Any], Any]:
    def make(config: Any) -> Any:
        from koboi_tools_git.settings import settings_from

        return kind(settings_from(config))

    return make
