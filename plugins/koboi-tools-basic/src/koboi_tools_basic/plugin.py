"""koboi hooks of koboi-tools-basic. The tools are light: stdlib plus the kernel."""

from __future__ import annotations

from collections.abc import Callable

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    from koboi_tools_basic.tools import calculator, current_time

    register(calculator)
    register(current_time)
