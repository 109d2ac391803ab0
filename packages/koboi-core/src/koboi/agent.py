"""``KoboiAgent``: the library facade over config, plugins, store and loop.

::

    async with KoboiAgent.from_config("configs/quickstart.yaml") as agent:
        result = await agent.run("What is 2 + 2?")
        async for event in agent.stream("And 3 * 3?", session_id=result.session_id):
            ...
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from koboi import _hints
from koboi import journal as J
from koboi.approval import Approver, DenyAllApprover
from koboi.config import (
    AgentConfig,
    build_store,
    load_config,
    load_env_files,
    resolve_store_url,
    validate_config,
)
from koboi.errors import KoboiError, LeaseHeld, SessionNotFound
from koboi.events import AgentEvent, FinalEvent, RunResult
from koboi.interceptors import Interceptor
from koboi.loop import AgentRun, LoopParts
from koboi.models import build_model
from koboi.plugins import PluginHost, default_host
from koboi.provider import ModelProvider
from koboi.sandbox import Sandbox
from koboi.store import Lease, Store, holder_is_dead
from koboi.tools import Tool


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
        when its sandbox isolates them (the C3 rule): it is refused at
        :meth:`open` otherwise, and each destructive call is checked again.
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
    ) -> None:
        self.config = config
        self.autonomous = autonomous
        self.host = host or default_host()
        self.approver = approver or DenyAllApprover()
        self._extra_tools = list(extra_tools)
        self._provider = provider
        self._store = store
        self._sandbox = sandbox
        self._extra_interceptors = list(interceptors)
        self._resources = dict(resources or {})
        self._parts: LoopParts | None = None
        self._stack: AsyncExitStack | None = None
        self._session_locks: dict[str, anyio.Lock] = {}
        self._active_runs: set[AgentRun] = set()
        #: Who holds a session's lease while this agent runs it: host, process, agent.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # -- construction ------------------------------------------------------------

    @classmethod
    def from_config(
        cls, path: str | os.PathLike[str], *, host: PluginHost | None = None, **kwargs: Any
    ) -> KoboiAgent:
        """Load and validate a YAML config (``.env`` beside it is loaded first)."""
        host = host or default_host()
        return cls(load_config(path, host.catalog()), host=host, **kwargs)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        base_dir: str | os.PathLike[str] | None = None,
        host: PluginHost | None = None,
        **kwargs: Any,
    ) -> KoboiAgent:
        """Validate a config given as a mapping (as if read from a file in ``base_dir``)."""
        host = host or default_host()
        directory = Path(base_dir) if base_dir is not None else Path.cwd()
        load_env_files(directory)
        config = validate_config(data, host.catalog(), base_dir=directory.resolve())
        return cls(config, host=host, **kwargs)

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Build the provider, store, sandbox, tools and interceptors. Idempotent.

        Starts the agent's lease keeper (a task group), so :meth:`close` must be
        awaited by the same task — ``async with agent:`` does that for you.
        """
        if self._parts is not None:
            return
        stack = AsyncExitStack()
        try:
            catalog = self.host.catalog()
            config = self.config
            store = self._store or build_store(
                resolve_store_url(config, catalog), config.base_dir, catalog
            )
            await store.open()
            stack.push_async_callback(_shielded(store.close))
            provider = build_model(config, catalog, store, provider=self._provider)
            stack.push_async_callback(_shielded(provider.aclose))
            sandbox = self._sandbox or self._build_sandbox(catalog)
            stack.push_async_callback(_shielded(sandbox.aclose))
            tools = self._build_tools(catalog)
            if self.autonomous:
                _refuse_unisolated_destruction(tools, sandbox)
            keeper_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(keeper_group.cancel_scope.cancel)  # unwinds before the group exits
            keeper_group.start_soon(self._keep_leases)
            interceptors = sorted(
                [*self.host.interceptors(config), *self._extra_interceptors],
                key=lambda i: i.priority,
            )
            _refuse_unenforced_mode(config, interceptors)
        except BaseException:
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
        )

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
        if stack is not None:
            # Not shielded as a whole: the keeper's task group must exit in this task's
            # own cancel scope. Each resource's close is shielded instead (_shielded).
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

    def _build_sandbox(self, catalog: Any) -> Sandbox:
        entry = catalog.sandboxes.get(self.config.sandbox.backend)
        if entry is None:
            raise KoboiError(f"sandbox backend {self.config.sandbox.backend!r} is not installed")
        sandbox = entry.target(self.config.sandbox_options, self.config)
        if not isinstance(sandbox, Sandbox):
            raise KoboiError(
                f"sandbox plugin {entry.plugin!r} returned {sandbox!r}, not a koboi.Sandbox"
            )
        return sandbox

    def _build_tools(self, catalog: Any) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
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
        for extra in self._extra_tools:
            if not isinstance(extra, Tool):
                raise KoboiError(f"extra_tools: {extra!r} is not a koboi.Tool (use @tool)")
            if extra.name in tools:
                raise KoboiError(f"extra tool {extra.name!r} has the name of an enabled tool")
            tools[extra.name] = extra
        return tools

    # -- running -------------------------------------------------------------------

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools this agent offers the model (after :meth:`open`)."""
        return dict(self._require().tools)

    @property
    def store(self) -> Store:
        return self._require().store

    def _require(self) -> LoopParts:
        if self._parts is None:
            raise KoboiError(
                "the agent is not open: use 'async with agent:' or 'await agent.open()' first"
            )
        return self._parts

    async def run(self, message: str, *, session_id: str | None = None) -> RunResult:
        """Run until a final answer (or a stop condition) and return the result."""
        async with aclosing(self.stream(message, session_id=session_id)) as events:
            async for event in events:
                if isinstance(event, FinalEvent):
                    return event.result
        raise KoboiError("the run ended without a final event")  # pragma: no cover

    async def stream(
        self, message: str, *, session_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run and yield typed events as they happen; the last is a ``FinalEvent``.

        With ``session_id`` of an existing session the conversation continues
        from its journal; an unknown id creates a session with that id. A session
        whose last run was interrupted must be resumed first (:meth:`resume`).
        """
        parts = self._require()
        sid, state = await self._session(parts, session_id)
        if state.interrupted:
            raise KoboiError(
                f"session {sid} has an interrupted run; resume it first "
                f"(koboi run CONFIG --resume {sid}, or agent.resume({sid!r}))"
            )
        async with self._hold(parts, sid) as lease:
            run = AgentRun(parts, sid, state, lease=lease)
            self._active_runs.add(run)
            try:
                async with aclosing(run.execute(message)) as events:
                    async for event in events:
                        yield event
            finally:
                self._active_runs.discard(run)

    async def resume(self, session_id: str) -> AsyncGenerator[AgentEvent, None]:
        """Finish the interrupted run of a session, yielding its events (see AgentRun.resume).

        ``session_id`` may be a full id, a unique prefix or ``last``. A session
        whose last run finished has nothing to resume: that is an error.
        """
        parts = self._require()
        info = await parts.store.resolve_session(session_id)
        async with self._hold(parts, info.id) as lease:
            # Read the journal only once we hold the session: nobody writes it now.
            state = J.fold_state(await parts.store.read(info.id))
            if not state.interrupted:
                outcome = state.last_outcome or "never started"
                raise KoboiError(
                    f"session {info.id} has no interrupted run to resume (its last run: {outcome})"
                )
            run = AgentRun(parts, info.id, state, lease=lease)
            self._active_runs.add(run)
            try:
                async with aclosing(run.resume()) as events:
                    async for event in events:
                        yield event
            finally:
                self._active_runs.discard(run)

    async def resume_run(self, session_id: str) -> RunResult:
        """:meth:`resume` to the end and return the result."""
        async with aclosing(self.resume(session_id)) as events:
            async for event in events:
                if isinstance(event, FinalEvent):
                    return event.result
        raise KoboiError("the resumed run ended without a final event")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def _hold(self, parts: LoopParts, session_id: str) -> AsyncIterator[Lease]:
        """Hold the session's lease for the length of a run; release it after."""
        lock = self._session_locks.setdefault(session_id, anyio.Lock())
        async with lock:
            ttl = self.config.agent.lease_seconds
            try:
                lease = await parts.store.acquire_lease(session_id, self.holder, ttl)
            except LeaseHeld as held:
                if not holder_is_dead(held.holder):
                    raise
                # Killed on this very machine: no need to wait for its lease to run out.
                lease = await parts.store.acquire_lease(
                    session_id, self.holder, ttl, take_over_from=held.holder
                )
            try:
                yield lease
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await parts.store.release_lease(lease)

    async def _session(
        self, parts: LoopParts, session_id: str | None
    ) -> tuple[str, J.SessionState]:
        store, config = parts.store, parts.config
        if session_id is not None:
            try:
                await store.get_session(session_id)
            except SessionNotFound:
                pass
            else:
                return session_id, J.fold_state(await store.read(session_id))
        info = await store.create_session(
            session_id,
            config_name=config.agent.name,
            config_hash=config.config_hash,
        )
        return info.id, J.SessionState()


def _refuse_unisolated_destruction(tools: Mapping[str, Tool], sandbox: Sandbox) -> None:
    """The C3 rule, before the run starts: an autonomous agent with a destructive tool
    needs an isolating sandbox."""
    from koboi.loop import c3_refusal
    from koboi.tools import Risk

    destructive = sorted(name for name, t in tools.items() if t.risk == Risk.DESTRUCTIVE)
    if destructive and not sandbox.isolated:
        reason = c3_refusal(", ".join(destructive), sandbox.name)
        raise KoboiError(f"refused before starting: {reason}; or remove the destructive tools")


def _refuse_unenforced_mode(config: AgentConfig, interceptors: Sequence[Interceptor]) -> None:
    """chat and plan forbid tools the kernel's own approvals would merely ask about:
    opening such an agent with nothing enforcing modes would quietly weaken it."""
    mode = config.agent.mode
    if mode in ("chat", "plan") and not any("mode" in i.enforces for i in interceptors):
        raise KoboiError(
            f"agent.mode is '{mode}', but no installed plugin enforces modes (install "
            f"{_hints.SECTIONS['governance']}, or check that it is not disabled); with "
            "agent.mode: act the kernel's approvals alone apply"
        )


def _shielded(close: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A close callback that finishes even when the closing task is being cancelled."""

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            await close()

    return run
