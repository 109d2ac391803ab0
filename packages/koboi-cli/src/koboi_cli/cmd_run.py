"""``koboi run``: run an agent once and show what it does as it happens.

Plain output (what pipes and files get)::

    → calculator {"expression":"2 + 2"}
    ← 4
    2 + 2 = 4

The answer text streams to stdout as the model produces it; each tool call
(``→``, name and canonical JSON arguments) and its result (``←``, truncated)
gets a line of its own, so the final answer always starts on a fresh line.
The child runs of a run (a sub-agent, a runner's nodes) show their tool calls,
results and answers as lines prefixed with their tag (``[moon] → ...``), and a
plugin's journaled events that the plugin summarises (a node starting, a
route taken) as ``· <summary>`` lines. A run that streamed no text (a runner's)
prints its final answer at the end. ``--json`` prints nothing but one JSON
object once the run has ended.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from koboi.approval import Approver, canonical_arguments
from koboi.events import (
    AgentEvent,
    ChildEvent,
    FinalEvent,
    PluginEvent,
    RunResult,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi_cli import host
from koboi_cli.approver import AssumeYesApprover, TerminalApprover
from koboi_cli.errors import CliError
from koboi_cli.style import Style, err, write

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi.config import AgentConfig
    from koboi.errors import LeaseHeld
    from koboi.registry import Registration
    from koboi.store import Store

#: How much of a tool result is shown; the model always sees all of it.
MAX_RESULT_LINES = 6
MAX_RESULT_CHARS = 400


def shorten(text: str, *, lines: int = MAX_RESULT_LINES, chars: int = MAX_RESULT_CHARS) -> str:
    """At most ``lines`` lines and ``chars`` characters, saying how much was cut."""
    text = text.rstrip()
    kept = text.splitlines()[:lines]
    shown = "\n".join(kept)
    if len(shown) > chars:
        shown = shown[:chars].rstrip()
    hidden = len(text) - len(shown)
    if hidden > 0:
        shown += f" … ({hidden} more characters)"
    return shown


class EventPrinter:
    """Writes a run's events to a stream, as they arrive."""

    def __init__(self, out: TextIO, style: Style) -> None:
        self.out = out
        self.style = style
        self._at_line_start = True
        self.refused_for_approval = 0
        #: Text of the run's own answer was shown (a runner's answer comes only at the end).
        self._streamed = False

    def _line(self, text: str) -> None:
        """A line of its own, even if the answer text stopped mid-line."""
        prefix = "" if self._at_line_start else "\n"
        write(self.out, f"{prefix}{text}\n")
        self._at_line_start = True

    def handle(self, event: AgentEvent, prefix: str = "") -> None:
        s = self.style
        if isinstance(event, ChildEvent):
            label = event.tag or event.parent_call_id or event.session_id[:8]
            self.handle(event.event, f"{prefix}{s.dim(f'[{label}]')} ")
        elif isinstance(event, TextDeltaEvent):
            if event.text and not prefix:  # a child's text shows in its answer line
                write(self.out, event.text)
                self._at_line_start = event.text.endswith("\n")
                self._streamed = True
        elif isinstance(event, FinalEvent):
            output = event.result.output.strip()
            if prefix:
                done = f"{event.result.outcome}: " if event.result.outcome != "completed" else ""
                self._line(f"{prefix}{s.dim('done:')} {done}{_indent(shorten(output or '-'))}")
            elif output and not self._streamed:
                self._line(output)
        elif isinstance(event, PluginEvent):
            said = host.get_host().summarize_event(event.type, event.data)
            if said is not None and event.event_id is not None:
                self._line(f"{prefix}{s.dim('· ' + said)}")
        elif isinstance(event, ToolCallEvent):
            call = event.call
            arguments = (
                call.raw_arguments
                if call.raw_arguments is not None
                else canonical_arguments(call.arguments)
            )
            self._line(f"{prefix}{s.cyan('→')} {s.bold(call.name)} {s.dim(arguments)}")
        elif isinstance(event, ToolResultEvent):
            body = _indent(shorten(event.content))
            if event.refused_by:
                self.refused_for_approval += event.refused_by == "approval"
                label = s.yellow(f"refused by {event.refused_by}:")
                self._line(f"{prefix}{s.yellow('←')} {label} {body}")
            elif event.is_error:
                self._line(f"{prefix}{s.red('←')} {s.red('error:')} {body}")
            else:
                self._line(f"{prefix}{s.green('←')} {s.dim(body)}")

    def finish(self) -> None:
        """End the answer's last line."""
        if not self._at_line_start:
            write(self.out, "\n")
            self._at_line_start = True


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def choose_approver(*, assume_yes: bool) -> Approver | None:
    """``--yes`` approves all; a terminal asks; otherwise None (the kernel denies)."""
    if assume_yes:
        return AssumeYesApprover()
    if _isatty(sys.stdin) and _isatty(sys.stdout):
        return TerminalApprover()
    return None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, OSError):
        return False


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "outcome": result.outcome,
        "output": result.output,
        "usage": result.usage.model_dump(mode="json"),
        "cost_usd": result.cost_usd,
        "steps": result.steps,
        "error": result.error,
    }


async def stream_run(
    agent: KoboiAgent, message: str, *, session_id: str | None, printer: EventPrinter | None
) -> RunResult:
    """Run the agent, handing every event to ``printer``; return the final result."""
    async with agent:
        return await _consume(agent.stream(message, session_id=session_id), printer)


async def _consume(
    events: AsyncGenerator[AgentEvent, None],
    printer: EventPrinter | None,
    on_first_event: Callable[[], None] | None = None,
) -> RunResult:
    """Hand every event of a run to ``printer``; return the final result."""
    result: RunResult | None = None
    async with aclosing(events):
        async for event in events:
            if on_first_event is not None:
                on_first_event()
                on_first_event = None
            if printer is not None:
                printer.handle(event)
            if isinstance(event, FinalEvent):
                result = event.result
    if printer is not None:
        printer.finish()
    if result is None:  # pragma: no cover - the kernel always ends with a FinalEvent
        from koboi.errors import KoboiError

        raise KoboiError("the run ended without a final event")
    return result


async def session_for_run(store: Store, ref: str | None) -> str | None:
    """The session ``koboi run -m MSG --session REF`` continues, or a new session's id.

    ``last`` is the most recently updated session; an existing id is that
    session; a unique prefix of an existing id is that session; an id that
    matches no session names a new session (the kernel creates it). A prefix
    of several sessions is an error: guessing which one would be worse.
    """
    from koboi.errors import SessionNotFound

    if ref is None:
        return None
    if ref == "last":
        return (await store.resolve_session(ref)).id
    try:
        return (await store.get_session(ref)).id
    except SessionNotFound:
        pass
    found = await store.match_sessions(ref, limit=2)
    if not found:
        return ref
    # One match: that session; several: resolve_session says which, as an error.
    return (await store.resolve_session(ref)).id


def lease_held_message(session_id: str, exc: LeaseHeld) -> str:
    left = max(0.0, exc.expires_at - time.time())
    return (
        f"session {session_id} is being run by {exc.holder} (its lease expires in {left:.0f} s "
        "unless renewed); wait for that run to end, or, if that process is gone, "
        "retry once the lease has expired"
    )


def is_run_source(path: Path) -> bool:
    """True when a plugin runs ``path`` (a registered run source claims its file name)."""
    return host.get_host().run_source_for(path) is not None


def run(
    config: Path,
    message: str | None,
    *,
    as_json: bool,
    session_id: str | None,
    assume_yes: bool,
    resume: str | None = None,
    cache_mode: str | None = None,
    replay_mode: str | None = None,
    tools: str | None = None,
) -> int:
    """Run once, or finish the interrupted run of session ``resume``; return the exit code
    (0 only when the run completed).

    A path a run source claims (``koboi_register_run_sources``) goes to its plugin,
    with every option; for a config, ``replay_mode`` is the response cache's mode.
    """
    source = host.get_host().run_source_for(config)
    if source is not None:
        options = {
            "message": message,
            "session": session_id,
            "resume": resume,
            "as_json": as_json,
            "assume_yes": assume_yes,
            "cache_mode": cache_mode,
            "replay_mode": replay_mode,
            "tools": tools,
        }
        return _run_source(source, config, options)
    if replay_mode is not None:
        cache_mode = replay_mode
    from koboi.config import load_config

    # The cache mode is given to the kernel, never through the environment: config
    # validation needs it too (under replay a provider needs no key).
    loaded = load_config(config, host.get_host().catalog(), cache_mode=cache_mode)
    return run_config(
        loaded,
        message,
        as_json=as_json,
        session_id=session_id,
        assume_yes=assume_yes,
        resume=resume,
        cache_mode=cache_mode,
    )


def _run_source(source: Registration[str], path: Path, options: dict[str, Any]) -> int:
    import importlib
    from types import MappingProxyType

    from koboi.errors import PluginError

    module_name, _, attribute = source.target.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:  # whatever a plugin's import raises: one line naming it
        raise PluginError(
            f"run source {source.name!r} of plugin {source.plugin!r} could not be loaded from "
            f"{source.target!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return int(target(path, MappingProxyType(options)))


def run_config(
    config: AgentConfig,
    message: str | None,
    *,
    as_json: bool,
    session_id: str | None,
    assume_yes: bool,
    resume: str | None = None,
    prepare: Callable[[Store], Awaitable[None]] | None = None,
    cache_mode: str | None = None,
) -> int:
    """Run a loaded config as ``koboi run`` does (printing, approvals, exit code).

    ``prepare(store)``, when given, is awaited once the agent is open, before the
    run starts (a plugin seeding the store, for example). ``cache_mode`` overrides
    the config's response cache mode.
    """
    from koboi.agent import KoboiAgent

    approver = choose_approver(assume_yes=assume_yes)
    agent = KoboiAgent(config, host=host.get_host(), approver=approver, cache_mode=cache_mode)
    printer = None if as_json else EventPrinter(sys.stdout, Style(sys.stdout))
    result = anyio.run(_run_async, agent, message, session_id, resume, printer, prepare)
    if printer is not None and printer.refused_for_approval and approver is None:
        err(
            "tool calls that need approval were denied: nobody was at a terminal to ask; "
            "run at a terminal to be asked, or pass --yes to approve them all",
            prefix="hint",
        )
    if as_json:
        write(sys.stdout, json.dumps(result_json(result), ensure_ascii=False) + "\n")
    if result.outcome == "completed":
        return 0
    err(f"run ended with outcome {result.outcome!r}: {result.error or 'no error message'}")
    return 1


async def _run_async(
    agent: KoboiAgent,
    message: str | None,
    session_ref: str | None,
    resume: str | None,
    printer: EventPrinter | None,
    prepare: Callable[[Store], Awaitable[None]] | None = None,
) -> RunResult:
    from koboi.errors import LeaseHeld

    async with agent:
        if prepare is not None:
            await prepare(agent.store)
        if resume is not None:
            session_id: str | None = (await agent.store.resolve_session(resume)).id
            note = f"resuming the interrupted run of session {session_id}"
            events = agent.resume(str(session_id))
        else:
            session_id = await session_for_run(agent.store, session_ref)
            note = (
                f"continuing session {session_id}"
                if session_ref is not None and session_id != session_ref
                else ""
            )
            events = agent.stream(message or "", session_id=session_id)
        try:
            return await _consume(
                events, printer, (lambda: err(note, prefix="note")) if note else None
            )
        except LeaseHeld as exc:
            raise CliError(lease_held_message(session_id or "?", exc)) from exc
