"""koboi hooks of koboi-openai-compat: its config section and its routes on ``koboi serve``.

The routes' module (FastAPI) is imported only when the server builds its app.
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
    from koboi_openai_compat.settings import SECTION, OpenAICompatSettings

    register(
        SECTION,
        OpenAICompatSettings,
        description="The OpenAI-compatible endpoint of koboi serve: the model id, approvals.",
    )


def create_server_extension(context: ServerContext) -> ServerExtension | None:
    """The routes, unless the config's section turns them off."""
    from koboi_openai_compat.settings import settings_of

    settings = settings_of(context.config)
    if not settings.enabled:
        return None
    from koboi_openai_compat.routes import extension

    return extension(context, settings)


@hookimpl
def koboi_server_register_extensions(register: RegisterServerExtension) -> None:
    register(
        "openai-compat",
        create_server_extension,
        description="GET /v1/models and POST /v1/chat/completions: the agent as an OpenAI model.",
    )
