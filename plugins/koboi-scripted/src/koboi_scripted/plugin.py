"""koboi hooks of the scripted provider. Imports its modules only when asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_scripted.config import ScriptedOptions
    from koboi_scripted.provider import ScriptedProvider


def create_provider(options: ScriptedOptions) -> ScriptedProvider:
    """Build the provider from its validated ``llm:`` options."""
    from koboi_scripted.provider import ScriptedProvider

    return ScriptedProvider(options)


@hookimpl
def koboi_register_providers(register: Callable[..., None]) -> None:
    from koboi_scripted.config import ScriptedOptions

    register(
        "scripted",
        create_provider,
        options=ScriptedOptions,
        description="Offline, deterministic model that replays a script or answers by regex rules.",
    )
