"""The conversation behind ``koboi chat``, whatever shows it (the TUI or the line mode).

It owns one :class:`~koboi.agent.KoboiAgent` built from the config, and one current
session. Sessions are the store's ordinary durable sessions: a message runs with
``agent.stream``, a session whose run was interrupted (a crash, a kill) is finished
with ``agent.resume``, and a cancelled run is journaled as ``cancelled``, so the
conversation goes on with the next message.

The agent is opened and closed by one task, :meth:`ChatController.serve` (the kernel
wants its task group entered and left by the same task); runs are started from other
tasks of the same event loop while it is open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from koboi import journal as J
from koboi.agent import KoboiAgent
from koboi.config import MODE_ORDER
from koboi.errors import KoboiError
from koboi.events import AgentEvent, FinalEvent, RunResult
from koboi.messages import Message
from koboi.store import JournalEvent, SessionInfo, SessionTotals, new_session_id

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from koboi.approval import Approver
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.store import Store

OnEvent = Callable[[AgentEvent], None]


class ChatError(KoboiError):
    """Something the person asked that cannot be done now: one line says why and what to do."""


@dataclass
class Attached:
    """A session just made current: its conversation and what its last run left."""

    session_id: str
    messages: list[Message]
    #: Its last run was interrupted (a crash): it is finished before the next message.
    interrupted: bool
    #: Its last run waits for input: the next message is the reply.
    suspended: bool


@dataclass
class RunEnd:
    """How one run started from the chat ended: its result, or cancelled by the user."""

    result: RunResult | None
    cancelled: bool = False


@dataclass
class SessionRow:
    """A line of the session list."""

    info: SessionInfo
    first_input: str
    totals: SessionTotals = field(default_factory=SessionTotals)


class ChatController:
    """One agent, one current session, and the runs the person starts."""

    def __init__(
        self,
        config: AgentConfig,
        host: PluginHost,
        approver: Approver,
        *,
        agent_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        #: More keyword arguments of KoboiAgent (an application's provider, store, tools...).
        self.agent_options = dict(agent_options or {})
        self.host = host
        self.approver = approver
        self.session_id: str | None = None
        #: The current session's last run was interrupted: resume before the next message.
        self.needs_resume = False
        self._agent: KoboiAgent | None = None
        self._ready = anyio.Event()
        self._restart = anyio.Event()
        self._closing = False
        self._open_error: BaseException | None = None
        self._run_scope: anyio.CancelScope | None = None

    # -- the agent's lifetime -------------------------------------------------------

    async def serve(self) -> None:
        """Open the agent, keep it open until :meth:`close`; reopen it on a mode switch.

        An agent that fails to open is reported to :meth:`wait_ready`, and this waits
        for the next reopen (or the close) all the same.
        """
        while not self._closing:
            agent = KoboiAgent(
                self.config, host=self.host, approver=self.approver, **self.agent_options
            )
            try:
                await agent.open()
            except Exception as exc:  # reported to whoever waits: one line, no traceback
                self._open_error = exc
                self._ready.set()
                await self._restart.wait()
            else:
                try:
                    self._agent, self._open_error = agent, None
                    self._ready.set()
                    await self._restart.wait()
                finally:
                    self._agent = None
                    await agent.close()
            self._restart = anyio.Event()

    async def wait_ready(self) -> None:
        """Wait until the agent is open; raise what stopped it from opening."""
        await self._ready.wait()
        if self._open_error is not None:
            raise self._open_error

    def close(self) -> None:
        """Let :meth:`serve` close the agent and return."""
        self._closing = True
        self.cancel()
        self._restart.set()

    @property
    def agent(self) -> KoboiAgent:
        if self._agent is None:
            raise KoboiError("the agent is not open (it is being reopened, or it failed to)")
        return self._agent

    @property
    def store(self) -> Store:
        return self.agent.store

    # -- what the status line shows ----------------------------------------------------

    @property
    def mode(self) -> str:
        return str(self.config.agent.mode)

    @property
    def model(self) -> str:
        llm = self.config.llm
        if llm.pool:
            return "pool: " + ", ".join(llm.pool)
        model = getattr(self.config.llm_options, "model", None)
        return f"{llm.provider}:{model}" if model else str(llm.provider)

    @property
    def running(self) -> bool:
        return self._run_scope is not None

    async def totals(self) -> SessionTotals:
        """What the current session's runs used (tokens, cost)."""
        if self.session_id is None:
            return SessionTotals()
        try:
            info = await self.store.get_session(self.session_id)
        except KoboiError:
            return SessionTotals()
        if info.totals is not None:
            return info.totals
        return J.totals_of(await self.store.read(self.session_id))

    # -- sessions ---------------------------------------------------------------------

    def new_session(self) -> None:
        """The next message starts a new session."""
        self._refuse_while_running("start a new session")
        self.session_id, self.needs_resume = None, False

    async def attach(self, ref: str) -> Attached:
        """Make the session ``ref`` (an id, a unique prefix, or ``last``) current."""
        self._refuse_while_running("switch sessions")
        info = await self.store.resolve_session(ref)
        parent = info.metadata.get("parent_session")
        if parent:
            raise ChatError(
                f"session {info.id} is a sub-agent's session, run by session {parent}; "
                "open that session instead"
            )
        state = J.fold_state(await self.store.read(info.id))
        self.session_id, self.needs_resume = info.id, state.interrupted
        return Attached(
            session_id=info.id,
            messages=list(state.messages),
            interrupted=state.interrupted,
            suspended=state.suspended is not None,
        )

    async def sessions(self, limit: int = 50) -> list[SessionRow]:
        """The store's sessions, most recently updated first (sub-agents' left out)."""
        rows = []
        for info in await self.store.list_sessions(limit=limit):
            if info.metadata.get("parent_session"):
                continue
            first = await self.store.read(info.id, limit=1)
            said = str(first[0].data.get("input", "")) if first else ""
            totals = info.totals
            if totals is None:
                totals = J.totals_of(await self.store.read(info.id))
            rows.append(SessionRow(info, said, totals))
        return rows

    async def journal(self) -> list[JournalEvent]:
        """The current session's journal, in order."""
        if self.session_id is None:
            return []
        return await self.store.read(self.session_id)

    # -- runs -------------------------------------------------------------------------

    async def send(self, text: str, on_event: OnEvent) -> RunEnd:
        """Run ``text`` in the current session (a new one when there is none)."""
        if self.needs_resume:
            end = await self.resume(on_event)
            if end.cancelled or (end.result is not None and end.result.outcome == "suspended"):
                return end
        if self.session_id is None:
            self.session_id = new_session_id()
        return await self._consume(self.agent.stream(text, session_id=self.session_id), on_event)

    async def resume(self, on_event: OnEvent) -> RunEnd:
        """Finish the current session's interrupted run (after a crash)."""
        if self.session_id is None or not self.needs_resume:
            raise ChatError("the current session has no interrupted run to resume")
        end = await self._consume(self.agent.resume(self.session_id), on_event)
        self.needs_resume = False
        return end

    async def _consume(self, events: AsyncGenerator[AgentEvent, None], on_event: OnEvent) -> RunEnd:
        self._refuse_while_running("start another run")
        result: RunResult | None = None
        with anyio.CancelScope() as scope:
            self._run_scope = scope
            try:
                # Closed in this task, inside the scope: a cancelled run is journaled as
                # 'cancelled' before this returns, and the session stays usable.
                async with aclosing(events):
                    async for event in events:
                        on_event(event)
                        if isinstance(event, FinalEvent):
                            result = event.result
            finally:
                self._run_scope = None
        if scope.cancelled_caught:
            return RunEnd(result=None, cancelled=True)
        return RunEnd(result=result)

    def cancel(self) -> bool:
        """Cancel the run in progress; False when none is."""
        scope = self._run_scope
        if scope is None:
            return False
        scope.cancel()
        return True

    def _refuse_while_running(self, what: str) -> None:
        if self.running:
            raise ChatError(f"a run is in progress: cancel it (Ctrl-C) before you {what}")

    # -- mode, capture --------------------------------------------------------------

    async def switch_mode(self, mode: str) -> None:
        """Reopen the agent in ``mode`` (one of chat, plan, act, auto, yolo)."""
        if mode not in MODE_ORDER:
            raise ChatError(f"unknown mode {mode!r}; choose one of {', '.join(MODE_ORDER)}")
        self._refuse_while_running("switch modes")
        if mode == self.mode:
            return
        before = self.config
        self.config = _with_mode(before, mode)
        try:
            await self._reopen()
        except Exception as exc:  # any reason the agent cannot open so: back to the old mode
            self.config = before
            await self._reopen()
            raise ChatError(f"cannot switch to mode {mode!r}: {exc}") from exc

    async def _reopen(self) -> None:
        self._ready = anyio.Event()
        self._restart.set()
        await self.wait_ready()

    @property
    def can_capture(self) -> bool:
        """koboi-replay is installed and loaded (capture goes through its public API)."""
        info = self.host.get("replay")
        return info is not None and info.status == "loaded"

    async def capture(self, output: Path) -> str:
        """Freeze the current session into a bundle at ``output`` (koboi-replay)."""
        if not self.can_capture:
            raise ChatError(
                "capturing a bundle needs koboi-replay (install koboi-replay, or "
                "koboi-agent with it); it is not installed or not loaded"
            )
        if self.session_id is None:
            raise ChatError("there is no session to capture yet: send a message first")
        self._refuse_while_running("capture the session")
        if self.config.source is None:
            raise ChatError("this agent was not loaded from a config file: nothing to capture")
        if await anyio.Path(output).exists():
            raise ChatError(f"{output} already exists; choose another name")
        from koboi_replay import capture_session

        captured: Any = await capture_session(
            self.store, self.session_id, config_path=self.config.source, host=self.host
        )
        size = captured.bundle.write(output, overwrite=False)
        return f"captured session {self.session_id} into {output} ({size} bytes)"


def _with_mode(config: AgentConfig, mode: str) -> AgentConfig:
    agent = config.agent.model_copy(update={"mode": mode})
    return dataclasses.replace(config, agent=agent)
