"""koboi hooks of koboi-hooks.

Only ``@hookimpl`` functions here: the settings (pydantic), the runner and the
interceptor are imported when an agent uses the ``hooks`` section.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koboi.hookspecs import hookimpl

SECTION = "hooks"


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_hooks.settings import HooksSettings

    register(
        SECTION,
        HooksSettings,
        description="Command and URL hooks on the run's events (the shared JSON-on-stdin contract).",
    )


@hookimpl
def koboi_register_interceptors(register: Callable[..., None], config: Any) -> None:
    settings = config.section(SECTION)
    if settings is None:
        return
    from koboi_hooks.interceptor import CommandHooks
    from koboi_hooks.runner import HookRunner

    register(CommandHooks(HookRunner(settings)))


@hookimpl
def koboi_context_register_compaction_hooks(register: Callable[..., None]) -> None:
    """pre_compact hooks, for koboi-context (never called when it is not installed)."""
    from koboi_hooks.compaction import PreCompactHooks

    register("hooks", PreCompactHooks())
