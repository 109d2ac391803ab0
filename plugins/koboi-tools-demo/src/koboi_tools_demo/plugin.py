"""koboi hooks of koboi-tools-demo. The tool module is stdlib plus the kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    from koboi_tools_demo.tools import append_log

    register(append_log)


@hookimpl
def koboi_register_interceptors(register: Callable[..., None], config: Any) -> None:
    # Test hook only: nothing is registered unless KOBOI_DEMO_PAUSE_IN_MODEL_CALL is set
    # and the agent uses append_log, so ordinary agents pay nothing for it.
    from koboi_tools_demo import hooks

    if hooks.pause_in_model_call_step() is None:
        return
    if "append_log" not in getattr(config.tools, "builtin", ()):
        return
    register(hooks.PauseInModelCall())
