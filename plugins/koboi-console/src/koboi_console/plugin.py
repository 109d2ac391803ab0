"""koboi hooks of koboi-console (plugin id ``console``): the ``console`` section, and the
console's pages added to ``koboi serve`` through koboi-server's
``koboi_server_register_extensions``.

Imports nothing heavy: FastAPI and Jinja2 load when a server builds an app whose
config has an enabled ``console`` section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterConfigSection
    from koboi_server.extensions import ServerContext, ServerExtension
    from koboi_server.hookspecs import RegisterServerExtension


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_console.settings import SECTION, ConsoleSettings

    register(
        SECTION,
        ConsoleSettings,
        description="A web console on koboi serve: sessions, live runs, approvals, jobs, audit.",
    )


def create_server_extension(context: ServerContext) -> ServerExtension | None:
    """The console's routes, when the config has an enabled ``console`` section."""
    from koboi_console.settings import SECTION, settings_of

    settings = settings_of(context.config.section(SECTION))
    if settings is None:
        return None
    from koboi_console.routes import console_extension

    return console_extension(context, settings)


@hookimpl
def koboi_server_register_extensions(register: RegisterServerExtension) -> None:
    register(
        "console",
        create_server_extension,
        description="A web console at /console: log in with an API key; your sessions, a "
        "run's live events, approvals, jobs and the audit trail of a session.",
    )
