"""``KoboiAgent``: the library facade over config, plugins, store and loop.

::

    async with KoboiAgent.from_config("configs/quickstart.yaml") as agent:
        result = await agent.run("What is 2 + 2?")
        async for event in agent.stream("And 3 * 3?", session_id=result.session_id):
            ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from koboi import journal as J
from koboi.approval import Approver, DenyAllApprover
from koboi.config import (
    AgentConfig,
    build_store,
    load_config,
    load_env_files,
    resolve_store,
    validate_config,
)
from koboi.errors import KoboiError, SessionNotFound
from koboi.events import AgentEvent, FinalEvent, RunResult, ToolResultEvent
from koboi.interceptors import Interceptor
from koboi.loop import AgentRun, LoopParts, session_status, unattended_destruction_refusal
from koboi.messages import ToolCall
from koboi.models import build_model
from koboi.plugins import Catalog, PluginHost, default_host
from koboi.provider import ModelProvider
from koboi.runners import LoopRunner, Runner
from koboi.sandbox import Sandbox
from koboi.store import Lease, SessionInfo, Store, capability, take_lease
from koboi.tools import Tool
from koboi.toolsets import ToolList, Toolset, ToolsetContext
from koboi.tracing import TraceContext


@dataclass(frozen=True)
class ToolCallResult:
    """What a governed direct tool call (:meth:`KoboiAgent.call_tool`) gave."""

    session_id: str
    call_id: str
    name: str
    content: str
    is_error: bool
    #: The pipeline stage that refused the call (``mode``, ``policy``, ``approval``...).
    refused_by: str | None = None
    #: ``completed``, ``refused``, ``failed`` or ``suspended`` (see ``result``).
    outcome: str = "completed"
    result: RunResult | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "completed"


class KoboiAgent:
    """An agent assembled from a validated config and the installed plugins.

    :param approver: decides on tool calls that need approval; default denies
        (there is nobody to ask).
    :param extra_tools: tools defined by the application, enabled in addition to
        ``tools.builtin``.
    :param provider, store, sandbox: use these instead of building them from
        the config (tests, embedding).
    :param interceptors: added to those the plugins register.
    :param resources: objects tools can ask for with ``ctx.get(Type)``.
    :param autonomous: nobody can approve anything (a background job, a
        schedule, an A2A call). Such an agent may only have destructive tools
        when its sandbox isolates them (the rule "destructive tools in unattended
        runs need an isolating sandbox"): it is refused at :meth:`open`
        otherwise, and each destructive call is checked again.
    :param cache_mode: the response cache mode (``live``, ``record``, ``replay``,
        ``cache``) instead of the config's.
    :param toolsets: toolsets to open and offer beside those plugins register.
    :param plugin_toolsets: False: the plugins' toolsets are not built at all, only
        ``toolsets`` are offered (a replay offers the recorded toolset tools instead of
        connecting to their servers).
    :param runner: run with this runner instead of the config's ``agent.runner``.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        host: PluginHost | None = None,
        approver: Approver | None = None,
        extra_tools: Sequence[Tool] = (),
        provider: ModelProvider | None = None,
        store: Store | None = None,
        sandbox: Sandbox | None = None,
        interceptors: Sequence[Interceptor] = (),
        resources: Mapping[type[Any], Any] | None = None,
        autonomous: bool = False,
        cache_mode: str | None = None,
        toolsets: Sequence[Toolset] = (),
        plugin_toolsets: bool = True,
        runner: Runner | None = None,
    ) -> None:
        self.config = config
        self._plugin_toolsets = plugin_toolsets
        self.autonomous = autonomous
        self.host = host or default_host()
        self.approver = approver or DenyAllApprover()
        self._extra_tools = list(extra_tools)
        self._extra_toolsets = list(toolsets)
        self._runner = runner
        self._provider = provider
        self._store = store
        self._sandbox = sandbox
        self._extra_interceptors = list(interceptors)
        self._resources = dict(resources or {})
        self._cache_mode = cache_mode
        self._parts: LoopParts | None = None
        self._stack: AsyncExitStack | None = None
        #: Providers of ``providers`` entries that child runs named, built when first named.
        self._named_models: dict[str, ModelProvider] = {}
        self._session_locks: dict[str, anyio.Lock] = {}
        self._active_runs: set[AgentRun] = set()
        #: Who holds a session's lease while this agent runs it: host, process, agent.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # -- construction ------------------------------------------------------------

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str],
        *,
        host: PluginHost | None = None,
        cache_mode: str | None = None,
        **kwargs: Any,
    ) -> KoboiAgent:
        """Load and validate a YAML config (``.env`` beside it is loaded first)."""
        host = host or default_host()
        config = load_config(path, host.catalog(), cache_mode=cache_mode)
        return cls(config, host=host, cache_mode=cache_mode, **kwargs)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        base_dir: str | os.PathLike[str] | None = None,
        host: PluginHost | None = None,
        cache_mode: str | None = None,
        **kwargs: Any,
    ) -> KoboiAgent:
        """Validate a config given as a mapping (as if read from a file in ``base_dir``)."""
        host = host or default_host()
        directory = Path(base_dir) if base_dir is not None else Path.cwd()
        load_env_files(directory)
        config = validate_config(
            data, host.catalog(), base_dir=directory.resolve(), cache_mode=cache_mode
        )
        return cls(config, host=host, cache_mode=cache_mode, **kwargs)

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Build the provider, store, sandbox, tools, toolsets and interceptors. Idempotent.

        Starts the agent's task group (the lease keeper, live tool calls), so
        :meth:`close` must be awaited by the same task — ``async with agent:``
        does that for you.
        """
        if self._parts is not None:
            return
        stack = AsyncExitStack()
        try:
            catalog = self.host.catalog()
            config = self.config
            store = self._store or build_store(*resolve_store(config, catalog), catalog)
            await store.open()
            stack.push_async_callback(_shielded(store.close))
            provider = build_model(
                config, catalog, store, provider=self._provider, mode=self._cache_mode
            )
            stack.push_async_callback(_shielded(provider.aclose))
            sandbox = self._sandbox or self._build_sandbox(catalog)
            stack.push_async_callback(_shielded(sandbox.aclose))
            tools, tool_plugins = self._build_tools(catalog)
            # Entered before the toolsets open: a toolset may run tasks in it that live as
            # long as the agent (a server's session), and its aclose() runs before the
            # group is cancelled.
            task_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(task_group.cancel_scope.cancel)  # unwinds before the group exits
            context = ToolsetContext(
                config, sandbox, store, self.host, self._resources, task_group=task_group
            )
            toolsets = await self._open_toolsets(catalog, stack, context)
            tool_list = ToolList.build(
                tools, toolsets, tool_plugins, namespaces=config.tools.namespaces
            )
            if self.autonomous:
                _refuse_unisolated_destruction(tool_list.tools, sandbox, catalog)
            runner = self._build_runner(catalog)
            task_group.start_soon(self._keep_leases)
            interceptors = sorted(
                [*self.host.interceptors(config), *self._extra_interceptors],
                key=lambda i: i.priority,
            )
            _refuse_unenforced_mode(config, interceptors, catalog)
            _check_store_needs(store, interceptors)
        except BaseException:  # undo what was opened, whatever stopped the opening
            await stack.aclose()
            raise
        self._stack = stack
        self._parts = LoopParts(
            config=config,
            provider=provider,
            store=store,
            sandbox=sandbox,
            approver=self.approver,
            tools=tools,
            interceptors=interceptors,
            resources=self._resources,
            autonomous=self.autonomous,
            toolsets=toolsets,
            tool_list=tool_list,
            runner=runner,
            spawn=task_group.start_soon,
            host=self.host,
            named_model=self._named_model,
        )

    async def _open_toolsets(
        self, catalog: Catalog, stack: AsyncExitStack, context: ToolsetContext
    ) -> list[Toolset]:
        opened: list[Toolset] = []
        candidates: list[tuple[str, Toolset]] = []
        for entry in catalog.toolsets if self._plugin_toolsets else ():
            made = entry.target(self.config)
            if made is None:
                continue
            if not isinstance(made, Toolset):
                raise KoboiError(
                    f"toolset plugin {entry.plugin!r} returned {made!r}, not a koboi Toolset"
                )
            if not made.plugin:
                made.plugin = entry.plugin
            candidates.append((entry.plugin, made))
        candidates += [("application", t) for t in self._extra_toolsets]
        for owner, toolset in candidates:
            stack.push_async_callback(_shielded(toolset.aclose))
            try:
                await toolset.open(context)
            except KoboiError:
                raise
            except Exception as exc:  # a plugin's toolset failing to open: say which, then stop
                raise KoboiError(
                    f"toolset {toolset.name!r} (plugin {owner!r}) could not open: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            opened.append(toolset)
        return opened

    def _named_model(self, name: str) -> ModelProvider:
        """The provider of the ``providers`` entry ``name`` (a child run's own model), with
        the config's prices and cache mode; built once, closed with the agent."""
        built = self._named_models.get(name)
        if built is not None:
            return built
        parts, stack = self._require(), self._stack
        config = self.config
        section = config.providers.get(name)
        if section is None or stack is None:
            known = ", ".join(sorted(config.providers)) or "none"
            raise KoboiError(
                f"model {name!r} is not an entry of the providers section (entries: {known})"
            )
        named = dataclasses.replace(
            config, llm=section, llm_options=config.provider_options.get(name), llm_name=name
        )
        built = build_model(named, self.host.catalog(), parts.store, mode=self._cache_mode)
        stack.push_async_callback(_shielded(built.aclose))
        self._named_models[name] = built
        return built

    def _build_runner(self, catalog: Catalog) -> Runner:
        if self._runner is not None:
            return self._runner
        name = self.config.runner_name
        entry = catalog.runners.get(name)
        if entry is None:
            if name == "loop":
                return LoopRunner()
            raise KoboiError(f"runner {name!r} is not installed")
        runner = entry.target(self.config.runner_options, self.config)
        if not isinstance(runner, Runner):
            raise KoboiError(f"runner plugin {entry.plugin!r} returned {runner!r}, not a Runner")
        return runner

    async def _keep_leases(self) -> None:
        """Renew the lease of every run in progress while it waits on something slow.

        One task for the agent, not one per call: a run renews at each commit
        anyway; this covers a long model call, tool call or wait for a human.
        """
        ttl = self.config.agent.lease_seconds
        while True:
            await anyio.sleep(ttl / 3)
            for run in list(self._active_runs):
                with contextlib.suppress(Exception):
                    # A lost lease is noticed by the run at its next write.
                    await run._renew_if_due(margin=2 / 3)

    async def close(self) -> None:
        """Close what :meth:`open` built, in reverse order."""
        stack, self._stack, self._parts = self._stack, None, None
        self._named_models = {}
        if stack is not None:
            # Not shielded as a whole: the task group must exit in this task's own
            # cancel scope. Each resource's close is shielded instead (_shielded).
            await stack.aclose()

    async def __aenter__(self) -> KoboiAgent:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _build_sandbox(self, catalog: Catalog) -> Sandbox:
        entry = catalog.sandboxes.get(self.config.sandbox.backend)
        if entry is None:
            raise KoboiError(f"sandbox backend {self.config.sandbox.backend!r} is not installed")
        sandbox = entry.target(self.config.sandbox_options, self.config)
        if not isinstance(sandbox, Sandbox):
            raise KoboiError(
                f"sandbox plugin {entry.plugin!r} returned {sandbox!r}, not a koboi.Sandbox"
            )
        return sandbox

    def _build_tools(self, catalog: Catalog) -> tuple[dict[str, Tool], dict[str, str]]:
        """The config's tools by name, and the plugin id of each plugin's tool."""
        tools: dict[str, Tool] = {}
        plugins: dict[str, str] = {}
        for name in self.config.tools.builtin:
            entry = catalog.tools.get(name)
            if entry is None:
                raise KoboiError(f"tool {name!r} is not installed")
            made = entry.target if isinstance(entry.target, Tool) else entry.target(self.config)
            if not isinstance(made, Tool) or made.name != name:
                raise KoboiError(
                    f"plugin {entry.plugin!r}: the factory of tool {name!r} returned {made!r}"
                )
            tools[name] = made
            plugins[name] = entry.plugin
        for extra in self._extra_tools:
            if not isinstance(extra, Tool):
                raise KoboiError(f"extra_tools: {extra!r} is not a koboi.Tool (use @tool)")
            if extra.name in tools:
                raise KoboiError(f"extra tool {extra.name!r} has the name of an enabled tool")
            tools[extra.name] = extra
        return tools, plugins

    # -- running -------------------------------------------------------------------

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools this agent offers the model now (after :meth:`open`)."""
        parts = self._require()
        return dict(parts.tool_list.tools if parts.tool_list is not None else parts.tools)

    @property
    def store(self) -> Store:
        return self._require().store

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox the agent's tools run in (after :meth:`open`)."""
        return self._require().sandbox

    def _require(self) -> LoopParts:
        if self._parts is None:
            raise KoboiError(
                "the agent is not open: use 'async with agent:' or 'await agent.open()' first"
            )
        return self._parts

    async def run(
        self,
        message: str,
        *,
        session_id: str | None = None,
        trace: TraceContext | None = None,
    ) -> RunResult:
        """Run until a final answer (or a stop condition) and return the result."""
        async with aclosing(self.stream(message, session_id=session_id, trace=trace)) as events:
            async for event in events:
                if isinstance(event, FinalEvent):
                    return event.result
        raise KoboiError("the run ended without a final event")  # pragma: no cover

    async def stream(
        self,
        message: str,
        *,
        session_id: str | None = None,
        trace: TraceContext | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run and yield typed events as they happen; the last is a ``FinalEvent``.

        With ``session_id`` of an existing session the conversation continues
        from its journal; an unknown id creates a session with that id. A session
        whose last run was interrupted must be resumed first (:meth:`resume`); a
        session whose last run is *suspended* (waiting for input) is continued with
        ``message`` as the reply. ``trace`` is the caller's trace context.
        """
        parts = self._require()
        sid, state, owner = await self._session(parts, session_id)
        if state.interrupted:
            raise KoboiError(
                f"session {sid} has an interrupted run; resume it first "
                f"(koboi run CONFIG --resume {sid}, or agent.resume({sid!r}))"
            )
        async with self._hold(parts, sid) as lease:
            if state.suspended is not None:
                # Read again under the lease: nobody else continues it meanwhile.
                state = J.fold_state(await parts.store.read(sid))
            run = AgentRun(parts, sid, state, lease=lease, owner=owner)
            events = (
                run.resume(reply=message, trace=trace)
                if state.suspended is not None
                else run.execute(message, trace=trace)
            )
            async with self._track(run, events) as stream:
                async for event in stream:
                    yield event

    async def resume(
        self,
        session_id: str,
        *,
        reply: Any = None,
        trace: TraceContext | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Finish the interrupted run of a session, or continue its suspended run with
        ``reply``, yielding its events (see :meth:`AgentRun.resume`).

        ``session_id`` may be a full id, a unique prefix or ``last``. A session
        whose last run finished has nothing to resume: that is an error.
        """
        parts = self._require()
        info = await parts.store.resolve_session(session_id)
        _refuse_child_session(info)
        async with self._hold(parts, info.id) as lease:
            # Read the journal only once we hold the session: nobody writes it now.
            state = J.fold_state(await parts.store.read(info.id))
            if not state.interrupted and state.suspended is None:
                outcome = state.last_outcome or "never started"
                await _settle_stale_status(parts.store, info.id, state, lease)
                raise KoboiError(
                    f"session {info.id} has no interrupted run to resume (its last run: {outcome})"
                )
            run = AgentRun(parts, info.id, state, lease=lease, owner=info.owner)
            async with self._track(run, run.resume(reply=reply, trace=trace)) as stream:
                async for event in stream:
                    yield event

    async def resume_run(
        self, session_id: str, *, reply: Any = None, trace: TraceContext | None = None
    ) -> RunResult:
        """:meth:`resume` to the end and return the result."""
        async with aclosing(self.resume(session_id, reply=reply, trace=trace)) as events:
            async for event in events:
                if isinstance(event, FinalEvent):
                    return event.result
        raise KoboiError("the resumed run ended without a final event")  # pragma: no cover

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        session_id: str | None = None,
        approver: Approver | None = None,
        trace: TraceContext | None = None,
        call_id: str | None = None,
    ) -> ToolCallResult:
        """Run one tool call through the whole pipeline, outside any model turn.

        Mode, policy, guardrails, trust, approval (``approver``, default the agent's,
        which denies by default), rate limits, the sandbox, the journal and the audit
        trail all apply, exactly as for a call the model makes: what exposes tools to
        the outside (an MCP server, an HTTP route) uses this and cannot bypass
        governance. The call is journaled as a run of its own in ``session_id``
        (a new session when None), which it does not add to the conversation.
        ``call_id`` names the call (default: a new ``direct_...`` id).
        """
        parts = self._require()
        sid, state, owner = await self._session(parts, session_id)
        if state.interrupted or state.suspended is not None:
            raise KoboiError(
                f"session {sid} has a run that is not finished; resume it first, or use "
                "another session for direct tool calls"
            )
        call = ToolCall(
            id=call_id or f"direct_{uuid.uuid4().hex[:16]}", name=name, arguments=dict(arguments)
        )
        async with self._hold(parts, sid) as lease:
            run = AgentRun(parts, sid, state, lease=lease, owner=owner, approver=approver)
            run.info.trace = trace
            final: RunResult | None = None
            shown: ToolResultEvent | None = None
            async with self._track(run, run.call_tool(call)) as stream:
                async for event in stream:
                    if isinstance(event, ToolResultEvent) and event.call_id == call.id:
                        shown = event
                    elif isinstance(event, FinalEvent):
                        final = event.result
        if final is None:  # pragma: no cover - a run always ends with a FinalEvent
            raise KoboiError("the tool call ended without a final event")
        refused_by = final.refused_by or (shown.refused_by if shown is not None else None)
        content = shown.content if shown is not None else (final.error or final.output)
        return ToolCallResult(
            session_id=sid,
            call_id=call.id,
            name=name,
            content=content,
            is_error=final.outcome != "completed",
            refused_by=refused_by,
            outcome=final.outcome,
            result=final,
        )

    @contextlib.asynccontextmanager
    async def _track(
        self, run: AgentRun, events: AsyncGenerator[AgentEvent, None]
    ) -> AsyncIterator[AsyncGenerator[AgentEvent, None]]:
        """The run's events, closed when the block ends (the caller may stop early); the
        lease keeper renews the run's lease meanwhile."""
        self._active_runs.add(run)
        try:
            async with aclosing(events) as stream:
                yield stream
        finally:
            self._active_runs.discard(run)

    @contextlib.asynccontextmanager
    async def _hold(self, parts: LoopParts, session_id: str) -> AsyncIterator[Lease]:
        """Hold the session's lease for the length of a run; release it after."""
        lock = self._session_locks.setdefault(session_id, anyio.Lock())
        async with lock:
            ttl = self.config.agent.lease_seconds
            # Killed on this very machine: no need to wait for its lease to run out.
            lease = await take_lease(parts.store, session_id, self.holder, ttl)
            try:
                yield lease
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    # Best effort: an expired lease frees the session anyway, and a store
                    # that fails now must not hide how the run ended.
                    await parts.store.release_lease(lease)

    async def _session(
        self, parts: LoopParts, session_id: str | None
    ) -> tuple[str, J.SessionState, str | None]:
        store, config = parts.store, parts.config
        if session_id is not None:
            try:
                info = await store.get_session(session_id)
            except SessionNotFound:
                pass
            else:
                _refuse_child_session(info)
                return session_id, J.fold_state(await store.read(session_id)), info.owner
        info = await store.create_session(
            session_id,
            config_name=config.agent.name,
            config_hash=config.config_hash,
        )
        return info.id, J.SessionState(), info.owner


async def _settle_stale_status(
    store: Store, session_id: str, state: J.SessionState, lease: Lease
) -> None:
    """A session whose status says ``running`` while its journal holds no run to finish:
    a process stopped between a run's last event and the status write after it (or
    between the status write and the run's first event). The journal is the truth; the
    status follows it, written under the lease, so recovery stops finding the session."""
    info = await store.get_session(session_id)
    if info.status != "running":
        return
    settled = session_status(state.last_outcome) if state.last_outcome else "created"
    await store.set_status(session_id, settled, fence=lease.fence)


def _refuse_child_session(info: SessionInfo) -> None:
    """A sub-agent's session is run by its parent (which continues it on resume), never
    on its own: that would run it with the parent's runner, outside the parent's budgets."""
    parent = info.metadata.get("parent_session")
    if parent:
        raise KoboiError(
            f"session {info.id} is a sub-agent's session, run by session {parent}; resume "
            f"or continue that session instead (koboi run CONFIG --resume {parent})"
        )


def _refuse_unisolated_destruction(
    tools: Mapping[str, Tool], sandbox: Sandbox, catalog: Catalog
) -> None:
    """Before the run starts: an unattended agent with a destructive tool needs an
    isolating sandbox."""
    from koboi.toolcall import isolating_sandboxes
    from koboi.tools import Risk

    destructive = sorted(name for name, t in tools.items() if t.risk == Risk.DESTRUCTIVE)
    if destructive and not sandbox.isolated:
        hint = isolating_sandboxes(catalog.hints.isolating_sandboxes())
        reason = unattended_destruction_refusal(", ".join(destructive), sandbox.name, hint)
        raise KoboiError(f"refused before starting: {reason}; or remove the destructive tools")


def _refuse_unenforced_mode(
    config: AgentConfig, interceptors: Sequence[Interceptor], catalog: Catalog
) -> None:
    """chat and plan forbid tools the kernel's own approvals would merely ask about:
    opening such an agent with nothing enforcing modes would quietly weaken it. The
    hint names what is missing (a plugin enforcing the ``mode`` stage), never a plugin:
    whoever provides one says so with a ``stage`` hint."""
    mode = config.agent.mode
    if mode in ("chat", "plan") and not any("mode" in i.enforces for i in interceptors):
        provider = catalog.hints.distribution("stage", "mode")
        install = (
            f"install {provider}, or check" if provider else "install a plugin that does, or check"
        )
        raise KoboiError(
            f"agent.mode is '{mode}', but no installed plugin enforces modes ({install} "
            "that it is not disabled); with agent.mode: act the kernel's approvals alone apply"
        )


def _check_store_needs(store: Store, interceptors: Sequence[Interceptor]) -> None:
    """Every optional store capability an interceptor needs, or one line saying which."""
    for interceptor in interceptors:
        for kind, feature in interceptor.store_needs:
            owner = interceptor.plugin or interceptor.name
            capability(store, kind, f"{feature}, of plugin '{owner}',")


def _shielded(close: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A close callback that finishes even when the closing task is being cancelled."""

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            await close()

    return run
