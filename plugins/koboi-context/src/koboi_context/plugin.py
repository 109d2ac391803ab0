"""koboi hooks of koboi-context: the ``context`` section, its interceptor, its hook.

Only ``@hookimpl`` functions here; the strategies (and the token counter) are
imported when an agent with a ``context`` section is assembled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import RegisterConfigSection, RegisterHookspecs, RegisterInterceptor

SECTION = "context"


@hookimpl
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    from koboi_context import hookspecs

    register(hookspecs)


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_context.config import ContextSettings

    register(
        SECTION,
        ContextSettings,
        description="Context strategies: every request of a long session fits the model's window.",
    )


@hookimpl
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    settings = config.section(SECTION)
    if settings is None:
        return
    from koboi_context.config import ContextSettings
    from koboi_context.interceptor import ContextStrategy

    assert isinstance(settings, ContextSettings)
    register(ContextStrategy(settings, config))
