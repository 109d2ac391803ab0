"""Toolset tools, offered again from the journal: a replay needs no MCP server, no peer.

A run journals the definition of every toolset tool it offers
(``run_started.toolset_tools``, ``tools_changed.definitions``). Under ``--tools
recorded`` the replay builds no plugin toolset at all (``KoboiAgent(plugin_toolsets=
False)``): one :class:`RecordedToolset` per recorded toolset offers, at each point
where the loop reads the toolsets' lists (a run starting, a step), exactly the
tools the recording offered there. Their results come from the bundle, like every
tool's; they never run.

Where the loop is, is read from the comparing store: the recorded events from the
first one not yet replayed up to the next model call (or tool call, or the run's
end) are the batch being written, and a ``run_started`` or ``tools_changed`` in it
says what is offered now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from koboi import journal as J
from koboi.messages import ToolSpec
from koboi.store import JournalEvent
from koboi.tools import Risk, Tool, ToolContext
from koboi.toolsets import Toolset, offered_name
from koboi_replay.comparing_store import ReplayStore
from koboi_replay.errors import ReplayError

#: Events at which the batch the loop writes next has certainly ended.
_BATCH_ENDS = frozenset({J.MODEL_CALL_STARTED, J.TOOL_CALL_STARTED, J.RUN_FINISHED})


class _AnyArguments(BaseModel):
    model_config = ConfigDict(extra="allow")


class RecordedTool(Tool):
    """A toolset's tool as the journal defined it; its results come from the bundle."""

    args_model = _AnyArguments

    def __init__(self, definition: Mapping[str, Any]) -> None:
        self.name = str(definition["name"])
        # Offered again under the namespace it was recorded under (a config may have
        # renamed its toolset's, or the toolset gave it one of its own).
        namespace = definition.get("namespace")
        self.namespace = str(namespace) if namespace else None
        self.description = str(definition.get("description", ""))
        self.risk = Risk(str(definition.get("risk", "moderate")))
        self.idempotent = bool(definition.get("idempotent", False))
        self.planning = bool(definition.get("planning", False))
        self.live_events = bool(definition.get("live_events", False))
        parameters = definition.get("parameters")
        self._spec = ToolSpec(
            name=self.name,
            description=self.description,
            parameters=dict(parameters) if isinstance(parameters, Mapping) else {"type": "object"},
        )

    def spec(self) -> ToolSpec:
        assert self._spec is not None
        return self._spec

    def invoke(self, args: Any, ctx: ToolContext) -> Any:
        raise ReplayError(
            f"replay: {self.name} is a recorded toolset tool; under --tools recorded it does "
            "not run (its result comes from the bundle)"
        )


class Timeline:
    """What each recorded toolset offered, as the replay advances (see the module)."""

    def __init__(self, events: Sequence[JournalEvent], store: ReplayStore) -> None:
        self._events = events
        self._store = store
        #: Per toolset, in order of first appearance.
        self.toolsets: list[str] = []
        for event in events:
            named = [str(d.get("toolset", "toolset")) for d in _definitions(event)]
            named += [entry.partition(":")[0] for entry in _skipped(event)]
            for toolset in named:
                if toolset not in self.toolsets:
                    self.toolsets.append(toolset)
        self._cache: tuple[int, dict[str, dict[str, Mapping[str, Any]]], int] | None = None

    def now(self) -> tuple[int, dict[str, dict[str, Mapping[str, Any]]]]:
        """A number that moves whenever the offer changes, and the offer: per toolset,
        its tools' definitions by name, in order."""
        position = self._store.committed
        if self._cache is not None and self._cache[0] == position:
            return self._cache[2], self._cache[1]
        offered: dict[str, dict[str, Mapping[str, Any]]] = {}
        marker = 0
        for index, event in enumerate(self._events):
            if index >= position and event.type in _BATCH_ENDS:
                break
            if event.type == J.RUN_STARTED:
                data = J.RUN_STARTED.of(event)
                defined = [dict(d) for d in data.get("toolset_tools") or ()]
                if data.get("kind") != "tool_call":
                    offered = {}  # a message run: the whole offer
                for definition in defined:  # a direct call: the called tool, added
                    offered.setdefault(str(definition.get("toolset")), {})[
                        _offered_as(definition)
                    ] = definition
                _skipped_again(offered, data.get("tools_skipped") or ())
                marker = index + 1
            elif event.type == J.TOOLS_CHANGED:
                changed = J.TOOLS_CHANGED.of(event)
                for tools in offered.values():
                    for name in changed.get("removed") or ():
                        tools.pop(name, None)
                for added in changed.get("definitions") or ():
                    offered.setdefault(str(added.get("toolset")), {})[_offered_as(added)] = dict(
                        added
                    )
                _skipped_again(offered, changed.get("skipped") or ())
                # In the recorded order (a server may insert a tool anywhere in its list).
                order = {name: rank for rank, name in enumerate(changed.get("tools") or ())}
                for toolset, tools in offered.items():
                    offered[toolset] = dict(
                        sorted(tools.items(), key=lambda kv: order.get(kv[0], len(order)))
                    )
                marker = index + 1
        self._cache = (position, offered, marker)
        return marker, offered


def _offered_as(definition: Mapping[str, Any]) -> str:
    """The name a recorded tool was offered under (what ``tools_changed`` lists)."""
    name = str(definition["name"])
    namespace = definition.get("namespace")
    return offered_name(str(namespace), name) if namespace else name


def _skipped_again(
    offered: dict[str, dict[str, Mapping[str, Any]]], skipped: Sequence[str]
) -> None:
    """A toolset tool skipped for its name (``toolset:tool``) is offered again, to be
    skipped again: its definition never mattered."""
    for entry in skipped:
        toolset, _, name = entry.partition(":")
        if name:
            offered.setdefault(toolset, {}).setdefault(name, {"name": name, "toolset": toolset})


def _definitions(event: JournalEvent) -> Sequence[Mapping[str, Any]]:
    if event.type == J.RUN_STARTED:
        return J.RUN_STARTED.of(event).get("toolset_tools") or ()
    if event.type == J.TOOLS_CHANGED:
        return J.TOOLS_CHANGED.of(event).get("definitions") or ()
    return ()


def _skipped(event: JournalEvent) -> Sequence[str]:
    if event.type == J.RUN_STARTED:
        return J.RUN_STARTED.of(event).get("tools_skipped") or ()
    if event.type == J.TOOLS_CHANGED:
        return J.TOOLS_CHANGED.of(event).get("skipped") or ()
    return ()


class RecordedToolset(Toolset):
    """One recorded toolset: the tools it offered at this point of the recording."""

    on_collision = "skip"  # as recorded: a skipped tool is skipped again, or never offered

    def __init__(self, name: str, timeline: Timeline) -> None:
        self.name = name
        self._timeline = timeline
        self._made: dict[tuple[str, str], RecordedTool] = {}

    @property
    def version(self) -> int:
        return self._timeline.now()[0]

    @version.setter
    def version(self, value: int) -> None:  # the kernel never sets it; Toolset declares it
        pass

    def tools(self) -> Sequence[Tool]:
        _, offered = self._timeline.now()
        made: list[Tool] = []
        for name, definition in offered.get(self.name, {}).items():
            key = (name, repr(sorted(definition.items(), key=lambda kv: kv[0])))
            tool = self._made.get(key)
            if tool is None:
                tool = self._made[key] = RecordedTool(definition)
            made.append(tool)
        return made


def recorded_toolsets(events: Sequence[JournalEvent], store: ReplayStore) -> list[Toolset]:
    """A :class:`RecordedToolset` for each toolset the recording's runs offered tools of."""
    timeline = Timeline(events, store)
    return [RecordedToolset(name, timeline) for name in timeline.toolsets]
