"""koboi hooks of koboi-memory: the ``memory`` section, its tools, proactive memory and
``koboi memory``. Only ``@hookimpl`` functions; the rest is imported when used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import (
        RegisterCommand,
        RegisterConfigSection,
        RegisterInterceptor,
        RegisterTool,
    )
    from koboi.tools import Tool

SECTION = "memory"


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_memory.config import MemorySettings

    register(
        SECTION,
        MemorySettings,
        description="Long-term memory per user and agent: tools, proactive recall and extraction.",
    )


def create_store_tool(config: AgentConfig) -> Tool:
    from koboi_memory.tools import make_store_tool

    return make_store_tool(config)


def create_recall_tool(config: AgentConfig) -> Tool:
    from koboi_memory.tools import make_recall_tool

    return make_recall_tool(config)


def create_forget_tool(config: AgentConfig) -> Tool:
    from koboi_memory.tools import make_forget_tool

    return make_forget_tool(config)


@hookimpl
def koboi_register_tools(register: RegisterTool) -> None:
    register("memory_store", create_store_tool, description="Remember a fact about the user.")
    register("memory_recall", create_recall_tool, description="Search what is remembered.")
    register("memory_forget", create_forget_tool, description="Forget a remembered fact.")


@hookimpl
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    settings = config.section(SECTION)
    if settings is None:
        return
    from koboi_memory.config import MemorySettings

    assert isinstance(settings, MemorySettings)
    if settings.session_id is not None or settings.retention.max_messages is not None:
        from koboi.logs import get_logger

        get_logger("koboi.memory").warning(
            "memory.session_id and memory.retention have no effect in koboi: a session's "
            "conversation lives in its journal (continue one with koboi run --session)"
        )
    if not settings.proactive.enabled:
        return
    from koboi_memory.interceptor import ProactiveMemory

    register(ProactiveMemory(settings, config))


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register("memory", "koboi_memory.cli:app", help="List, search and forget remembered facts.")
