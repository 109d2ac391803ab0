"""The ``mcp`` toolset: every configured server's tools, offered to the agent.

Opened with the agent: each enabled server is started (at once, side by side)
in a task group the toolset holds until the agent closes. A server that cannot
be started is one warning line (or, with ``mcp.fail_fast``, stops the agent
from opening); its tools are still offered when the store remembers them from
an earlier start, so the model's call gets a clear error and tries the server
again. When a server's list changes (``tools/list_changed``, a restart), the
toolset's ``version`` moves and the loop journals the change before its next
step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi.store import KeyedRecords
from koboi.tools import Tool
from koboi.toolsets import Toolset, ToolsetContext
from koboi_mcp.config import McpSettings, ServerSettings
from koboi_mcp.connection import ServerConnection, ServerDown
from koboi_mcp.elicitation import Elicitor
from koboi_mcp.tools import McpTool, helper_tools, idempotent_of, risk_of

if TYPE_CHECKING:
    from pathlib import Path

    from koboi.store import Store

log = get_logger("koboi_mcp")

#: The kind of keyed record a server's last tool list is kept under.
TOOLS_RECORD = "mcp.tools"


def _fingerprint(settings: ServerSettings) -> str:
    """Identifies where a server is (its command or URL), for its remembered tool list."""
    where = [settings.transport, settings.command or "", *settings.args, settings.url or ""]
    return hashlib.sha256(json.dumps(where).encode()).hexdigest()[:16]


def offered(settings: ServerSettings, remote: Sequence[types.Tool]) -> list[types.Tool]:
    """The server's tools that its allow and deny lists let through."""
    allow = set(settings.allow) if settings.allow is not None else None
    deny = set(settings.deny)
    return [t for t in remote if (allow is None or t.name in allow) and t.name not in deny]


class McpToolset(Toolset):
    """The tools of the servers of one agent's ``mcp`` section."""

    name = "mcp"

    def __init__(self, settings: McpSettings, *, base_dir: Path) -> None:
        self.settings = settings
        self.base_dir = base_dir
        self.connections: dict[str, ServerConnection] = {}
        self._tools: list[Tool] = []
        self._signature: tuple[Any, ...] = ()
        self._stack: contextlib.AsyncExitStack | None = None
        self._store: Store | None = None

    async def open(self, context: ToolsetContext) -> None:
        self._store = context.store
        tasks = context.task_group
        if tasks is None:
            # A context built by hand (not by an agent): hold a task group of our own,
            # closed by aclose() in the same task.
            stack = contextlib.AsyncExitStack()
            self._stack = stack
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)
        for name, server in self.settings.servers.items():
            if not server.enabled:
                continue
            self.connections[name] = ServerConnection(
                name,
                server,
                sandbox=context.sandbox,
                store=context.store,
                base_dir=self.base_dir,
                tasks=tasks,
                on_tools_changed=self._changed,
                elicit=Elicitor(name, server),
            )
        failures: list[str] = []

        async def start(connection: ServerConnection) -> None:
            try:
                await connection.start()
            except ServerDown as exc:
                failures.append(str(exc))
                connection.state.tools = await self._remembered(connection)
            else:
                await self._remember(connection)

        async with anyio.create_task_group() as starting:
            for connection in self.connections.values():
                starting.start_soon(start, connection)
        if failures and self.settings.fail_fast:
            raise KoboiError("; ".join(sorted(failures)) + " (mcp.fail_fast is true)")
        for failure in sorted(failures):
            log.warning("%s; it will be tried again at its next call", failure)
        self._rebuild()

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)

    async def aclose(self) -> None:
        for connection in self.connections.values():
            await connection.stop()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    # -- the list -------------------------------------------------------------------

    def _changed(self, connection: ServerConnection) -> None:
        if self._rebuild():
            self.version += 1

    def _rebuild(self) -> bool:
        """Build the tool list from the servers' lists; True when it changed."""
        made: list[Tool] = []
        signature: list[Any] = []
        for name, connection in self.connections.items():
            server = connection.settings
            namespace = self.settings.namespace_of(name)
            for remote in offered(server, connection.state.tools):
                tool = McpTool(
                    connection,
                    remote,
                    namespace=namespace,
                    risk=risk_of(remote, server.risk),
                    idempotent=idempotent_of(remote, server.idempotent),
                )
                made.append(tool)
                signature.append(
                    (
                        tool.name,
                        tool.description,
                        json.dumps(tool.spec().parameters, sort_keys=True),
                        tool.risk.value,
                        tool.idempotent,
                    )
                )
            for helper in helper_tools(connection, namespace, connection.state.capabilities):
                made.append(helper)
                signature.append((helper.name,))
        changed = tuple(signature) != self._signature
        self._tools, self._signature = made, tuple(signature)
        return changed

    # -- what the store remembers ----------------------------------------------------

    def _records(self) -> KeyedRecords | None:
        from koboi.store import unwrap

        store = self._store
        if store is None:
            return None
        found = store if isinstance(store, KeyedRecords) else unwrap(store)
        return found if isinstance(found, KeyedRecords) else None

    async def _remember(self, connection: ServerConnection) -> None:
        records = self._records()
        if records is None:
            return
        data = {
            "tools": [
                t.model_dump(mode="json", by_alias=True, exclude_none=True)
                for t in connection.state.tools
            ]
        }
        try:
            await records.record_put(
                TOOLS_RECORD, f"{connection.name}:{_fingerprint(connection.settings)}", data
            )
        except Exception as exc:  # a cache: the server's tools are offered all the same
            log.warning("could not remember MCP server %r's tools: %s", connection.name, exc)

    async def _remembered(self, connection: ServerConnection) -> list[types.Tool]:
        records = self._records()
        if records is None:
            return []
        try:
            data = await records.record_get(
                TOOLS_RECORD, f"{connection.name}:{_fingerprint(connection.settings)}"
            )
        except Exception as exc:  # a cache: without it the server offers nothing until it runs
            log.warning("could not read MCP server %r's remembered tools: %s", connection.name, exc)
            return []
        if not data:
            return []
        return [types.Tool.model_validate(t) for t in data.get("tools") or ()]


def create_toolset(config: Any) -> McpToolset | None:
    """The toolset factory: None when the agent's config has no ``mcp`` section (or no
    enabled server)."""
    settings = config.section("mcp")
    if not isinstance(settings, McpSettings):
        return None
    if not any(s.enabled for s in settings.servers.values()):
        return None
    return McpToolset(settings, base_dir=config.base_dir)
