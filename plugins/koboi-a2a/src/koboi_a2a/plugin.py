"""koboi hooks of koboi-a2a: the ``a2a`` section, the peers' toolset, the A2A routes
of ``koboi serve`` and the ``koboi a2a`` command.

Only ``@hookimpl`` functions here: a2a-sdk (and its protobuf stack) is imported when
an agent with an ``a2a`` section opens, or when a server builds its routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterCommand, RegisterConfigSection, RegisterToolset


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_a2a import aliases
    from koboi_a2a.config import A2ASettings

    register(
        "a2a",
        A2ASettings,
        description="A2A: the agent card and endpoint koboi serve offers, and the peers called.",
        # koboi-agent's spelling: accepted, and `koboi validate --suggest` shows koboi's.
        aliases={"peers": aliases.peers},
    )


def create_toolset(config: Any) -> Any:
    """Toolset factory: the peers of the config's ``a2a`` section (None without any)."""
    section = config.section("a2a")
    if section is None or not section.peers:
        return None  # a2a-sdk is not imported for an agent that calls no peer
    from koboi_a2a.outbound import create_toolset as create

    return create(config)


@hookimpl
def koboi_register_toolsets(register: RegisterToolset) -> None:
    register("a2a", create_toolset, description="The skills of the config's A2A peers.")


def create_extension(context: Any) -> Any:
    """Server extension factory: the card and the A2A endpoint (None without a section)."""
    section = context.config.section("a2a")
    if section is None or not section.serve.enabled:
        return None  # a2a-sdk is not imported by a server that does not speak A2A
    from koboi_a2a.inbound import create_extension as create

    return create(context)


@hookimpl
def koboi_server_register_extensions(register: Any) -> None:
    register(
        "a2a",
        create_extension,
        description="The A2A agent card (signed) and JSON-RPC endpoint, tasks as jobs.",
    )


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "a2a",
        "koboi_a2a.cli:app",
        help="A2A: make a card-signing key, check the peers of a config.",
    )
