"""Toolsets: tools that are only known at run time and may come and go.

A plugin registers a toolset factory (``koboi_register_toolsets``); the kernel
calls it for each agent it assembles, opens what it returns (async), offers its
tools beside the config's own and closes it with the agent. An MCP server's
tools, a peer agent's skills, a directory of scripts are toolsets.

Every toolset has a namespace (:attr:`Toolset.namespace`, by default its name; a
config may rename it with ``tools.namespaces``): its tools are offered under
``<namespace>__<tool>``, made provider-safe (:func:`provider_safe_name`), each a
:class:`ToolsetTool` that keeps the toolset's own tool, and so its original name,
for the call. A toolset that gathers several sources (an MCP client with several
servers) may give a tool a namespace of its own (:attr:`Tool.namespace`), which
the tool is offered under instead of its toolset's. Between steps the loop compares each toolset's
:attr:`Toolset.version`; when it changed, the tool list is read again and the
change is journaled (``tools_changed``), so the journal says which tools each
model call was offered. A toolset tool goes through the same exact-name lookup
and decision pipeline as any tool.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from koboi.config import NAMESPACE_PATTERN
from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi.messages import ToolSpec
from koboi.tools import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from pydantic import BaseModel

    from koboi.config import AgentConfig
    from koboi.journal import ToolDefinitionData
    from koboi.plugins import PluginHost
    from koboi.sandbox import Sandbox
    from koboi.store import Store

log = get_logger("koboi.toolsets")

#: What model APIs accept as a tool name (OpenAI and Anthropic): no dots.
_PROVIDER_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
#: A namespace: letters, digits, ``_`` and ``-``, starting with a letter, short enough
#: to leave most of the 64 characters to the tool's own name.
_NAMESPACE = re.compile(NAMESPACE_PATTERN)
#: Between a namespace and a tool's own name: ``<namespace>__<tool>``.
NAMESPACE_SEPARATOR = "__"


def provider_safe_name(prefix: str, name: str, *, limit: int = 64) -> str:
    """``<prefix><name>`` as a tool name every model API accepts (``[A-Za-z0-9_-]{1,64}``,
    starting with a letter, as koboi's tool names do).

    A name that already fits is kept as it is. Otherwise characters outside the set
    become ``_``, and the name keeps its start and ends with a stable hash of the
    whole original, so two names that differ only where they were changed (``a.b``,
    ``a_b``) or past the cut never meet. Keep the original name to make the call.
    """
    raw = f"{prefix}{name}"
    if len(raw) <= limit and _PROVIDER_SAFE.match(raw) and raw[0].isalpha():
        return raw
    safe = _UNSAFE_CHARS.sub("_", raw).strip("_") or "tool"
    if not safe[0].isalpha():
        safe = f"t_{safe}"
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{safe[: limit - len(digest) - 1].rstrip('_')}_{digest}"


@dataclass(frozen=True)
class ToolsetContext:
    """What a toolset is given when the agent opens it.

    ``sandbox`` is the agent's own: a toolset that starts a process (an MCP server
    over stdio) starts it with ``sandbox.open_process(...)``, under the same
    confinement as every tool. A process opened here serves every session of the
    agent, so it gets ``session_id=None`` (the sandbox's shared workdir); a toolset
    that needs one process per session opens it from its tools, where the
    :class:`koboi.ToolContext` knows the session.
    """

    config: AgentConfig
    sandbox: Sandbox
    #: The agent's store (``records_of(store)`` for state that must outlive the process).
    store: Store | None = None
    host: PluginHost | None = field(default=None, repr=False)
    #: Resources the application passed to the agent (``KoboiAgent(resources=...)``).
    resources: Mapping[type[Any], Any] = field(default_factory=dict, repr=False)
    #: The agent's task group, for tasks that live as long as the agent (a server's
    #: session): ``await context.task_group.start(serve)``. Every toolset's ``aclose()``
    #: runs before the group is cancelled. None outside an agent (a toolset given a
    #: context by hand then holds its own).
    task_group: TaskGroup | None = field(default=None, repr=False)


class Toolset(ABC):
    """A source of tools opened for one agent.

    Subclasses set :attr:`name` and implement :meth:`tools`; they override
    :meth:`open` / :meth:`aclose` to connect and disconnect, and bump
    :attr:`version` whenever :meth:`tools` would answer differently (the loop then
    asks again before the next model call).
    """

    #: Shown in errors, ``tools_changed`` events and ``koboi plugins inspect``.
    name: str = "toolset"
    #: The prefix of the names its tools are offered under, ``<namespace>__<tool>``
    #: (1-32 letters, digits, ``_`` or ``-``, starting with a letter). None: the
    #: toolset's :attr:`name`. A config renames it with ``tools.namespaces``.
    namespace: str | None = None
    #: A tool whose name another tool already has: ``error`` refuses to open the
    #: agent (or, for a change mid-run, drops the tool and says so); ``skip`` drops it.
    on_collision: Literal["error", "skip"] = "error"
    #: Incremented by the toolset when its list changes.
    version: int = 0
    #: The id of the plugin that registered it (set by the kernel; "" = the
    #: application's): its tools may journal only ``<plugin>.*`` events.
    plugin: str = ""

    async def open(self, context: ToolsetContext) -> None:  # noqa: B027 - optional hook
        """Connect (start a server, fetch a list). Called once, when the agent opens,
        with the agent's sandbox and store (:class:`ToolsetContext`)."""

    @abstractmethod
    def tools(self) -> Sequence[Tool]:
        """The tools it offers now (no I/O: answer from what :meth:`open` fetched)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Disconnect. Called once, when the agent closes (also after a failed open)."""


def check_namespace(namespace: str, toolset: str) -> str:
    """``namespace`` when it is a valid namespace, else a KoboiError saying what to fix."""
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise KoboiError(
            f"toolset {toolset!r}: namespace {namespace!r} is not 1-32 letters, digits, '_' "
            "or '-' starting with a letter; set Toolset.namespace, or name one for it in "
            "tools.namespaces"
        )
    return namespace


def offered_name(namespace: str, tool_name: str) -> str:
    """The name a toolset's tool is offered under: ``<namespace>__<tool>``, provider-safe
    (a name that does not fit is shortened with a stable hash, see
    :func:`provider_safe_name`)."""
    return provider_safe_name(f"{namespace}{NAMESPACE_SEPARATOR}", tool_name)


class ToolsetTool(Tool):
    """A toolset's tool as a run offers it: under its namespaced name (what the model and
    the pipeline see), the toolset's own tool (:attr:`original`, with its original name)
    doing the work."""

    def __init__(self, original: Tool, name: str, toolset: str) -> None:
        self.original = original
        self.name = name
        #: The ``name`` of the toolset that offers it.
        self.toolset = toolset
        self.description = original.description
        self.args_model = original.args_model
        self.risk = original.risk
        self.idempotent = original.idempotent
        self.planning = original.planning
        self.live_events = original.live_events

    def spec(self) -> ToolSpec:
        """The toolset's tool's own spec (its parameters may not come from an arguments
        model: an MCP server's schema), under the offered name."""
        if self._spec is None:
            own = self.original.spec()
            self._spec = ToolSpec(
                name=self.name, description=own.description, parameters=own.parameters
            )
        return self._spec

    def parse_arguments(self, arguments: Mapping[str, Any]) -> BaseModel:
        return self.original.parse_arguments(arguments)

    async def invoke(self, args: Any, ctx: ToolContext) -> ToolResult:
        return await self.original(args, ctx)


@dataclass
class ToolList:
    """The tools a run offers: the config's own, then each toolset's, with collisions
    settled. Rebuilt when a toolset's version changes."""

    fixed: Mapping[str, Tool]
    toolsets: Sequence[Toolset] = ()
    #: The plugin id of each fixed tool ("" or absent: the application's).
    fixed_plugins: Mapping[str, str] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    #: The plugin id of each tool offered (the namespace of the events it may write).
    plugins: dict[str, str] = field(default_factory=dict)
    #: Toolset tools dropped because another tool had their name: ``"toolset:tool"``.
    skipped: list[str] = field(default_factory=list)
    #: The toolset (its ``name``) each toolset tool offered comes from.
    sources: dict[str, str] = field(default_factory=dict)
    #: The namespace of each toolset, by toolset name (declared, or set by the config).
    namespaces: dict[str, str] = field(default_factory=dict)
    _versions: tuple[int, ...] = ()
    #: The offered form of each toolset tool, kept while the tool is offered.
    _offered: dict[tuple[str, int], ToolsetTool] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        fixed: Mapping[str, Tool],
        toolsets: Sequence[Toolset],
        plugins: Mapping[str, str] | None = None,
        *,
        namespaces: Mapping[str, str] | None = None,
    ) -> ToolList:
        """The list at open: a collision under ``on_collision="error"`` is a KoboiError.
        ``plugins``: the plugin id of each fixed tool; ``namespaces``: the config's
        namespace for a toolset, by toolset name (``tools.namespaces``)."""
        made = cls(fixed, toolsets, dict(plugins or {}))
        made.namespaces = _namespaces(toolsets, namespaces or {})
        made._rebuild(strict=True)
        return made

    def changed(self) -> bool:
        """True when some toolset's version moved since the list was built."""
        return tuple(t.version for t in self.toolsets) != self._versions

    def refresh(self) -> tuple[list[str], list[str]]:
        """Rebuild after a change; return the names ``(added, removed)``. Mid-run a
        collision never fails the run: the colliding tool is skipped instead."""
        before = set(self.tools)
        self._rebuild(strict=False)
        after = set(self.tools)
        return sorted(after - before), sorted(before - after)

    def _rebuild(self, *, strict: bool) -> None:
        tools = dict(self.fixed)
        plugins = {name: self.fixed_plugins.get(name, "") for name in tools}
        owners = dict.fromkeys(tools, "the config")
        skipped: list[str] = []
        sources: dict[str, str] = {}
        offered: dict[tuple[str, int], ToolsetTool] = {}
        for toolset in self.toolsets:
            namespace = self.namespaces.get(toolset.name) or check_namespace(
                _declared(toolset), toolset.name
            )
            for tool in toolset.tools():
                if not isinstance(tool, Tool):
                    raise KoboiError(f"toolset {toolset.name!r} offered {tool!r}, not a koboi.Tool")
                own = tool.namespace
                name = offered_name(
                    check_namespace(own, toolset.name) if own is not None else namespace, tool.name
                )
                owner = owners.get(name)
                if owner is not None:
                    if strict and toolset.on_collision == "error":
                        raise KoboiError(
                            f"toolset {toolset.name!r} offers a tool named {name!r}, which "
                            f"{owner} already has; rename one of them (or set the toolset to "
                            "skip colliding tools)"
                        )
                    skipped.append(f"{toolset.name}:{tool.name}")
                    continue
                key = (name, id(tool))
                wrapped = self._offered.get(key) or ToolsetTool(tool, name, toolset.name)
                offered[key] = wrapped
                tools[name] = wrapped
                plugins[name] = toolset.plugin
                owners[name] = f"toolset {toolset.name!r}"
                sources[name] = toolset.name
        self._offered = offered
        for name in sorted(set(skipped) - set(self.skipped)):
            source, _, dropped = name.partition(":")
            log.warning(
                "toolset %r: tool %r is not offered, another tool already has that name",
                source,
                dropped,
            )
        self.tools = tools
        self.plugins = plugins
        self.skipped = skipped
        self.sources = sources
        self._versions = tuple(t.version for t in self.toolsets)

    def definitions(self, names: Sequence[str] | None = None) -> list[ToolDefinitionData]:
        """What the journal keeps of the toolset tools offered (all, or ``names``):
        enough to offer them again without their toolset (a replay, offline)."""
        wanted = self.sources if names is None else [n for n in names if n in self.sources]
        return [
            tool_definition(self.tools[name], self.sources[name], self._namespace_of(name))
            for name in wanted
        ]

    def _namespace_of(self, offered: str) -> str:
        tool = self.tools[offered]
        own = tool.original.namespace if isinstance(tool, ToolsetTool) else None
        return own if own is not None else self.namespaces.get(self.sources[offered], "")


def tool_definition(tool: Tool, toolset: str, namespace: str) -> ToolDefinitionData:
    """A toolset's tool as JSON data: its own name and the namespace it was offered under
    (a replay offers it under the same name), its spec, and what governance decides by."""
    original = tool.original if isinstance(tool, ToolsetTool) else tool
    spec = original.spec()
    return {
        "name": original.name,
        "toolset": toolset,
        "namespace": namespace,
        "description": spec.description,
        "parameters": spec.parameters,
        "risk": tool.risk.value,
        "idempotent": tool.idempotent,
        "planning": tool.planning,
        "live_events": tool.live_events,
    }


def _declared(toolset: Toolset) -> str:
    return toolset.namespace if toolset.namespace is not None else toolset.name


def _namespaces(toolsets: Sequence[Toolset], configured: Mapping[str, str]) -> dict[str, str]:
    """Each toolset's namespace (the config's, else the declared one), checked: valid, and
    no two toolsets sharing one (their tools would be told apart by chance only)."""
    names = {t.name for t in toolsets}
    unknown = sorted(set(configured) - names)
    if unknown:
        opened = ", ".join(sorted(names)) or "none"
        raise KoboiError(
            f"tools.namespaces names toolset(s) this agent does not open: "
            f"{', '.join(unknown)} (its toolsets: {opened})"
        )
    found: dict[str, str] = {}
    by_namespace: dict[str, str] = {}
    for toolset in toolsets:
        if toolset.name in found:
            raise KoboiError(
                f"two toolsets are named {toolset.name!r}; a toolset's name must be its own "
                "(tools.namespaces and tools_skipped name toolsets by it)"
            )
        namespace = check_namespace(configured.get(toolset.name, _declared(toolset)), toolset.name)
        other = by_namespace.get(namespace)
        if other is not None and other != toolset.name:
            raise KoboiError(
                f"toolsets {other!r} and {toolset.name!r} both use the namespace "
                f"{namespace!r}; give one another namespace in tools.namespaces"
            )
        by_namespace[namespace] = toolset.name
        found[toolset.name] = namespace
    return found
