"""``koboi run``: run an agent once and show what it does as it happens.

Plain output (what pipes and files get)::

    → calculator {"expression":"2 + 2"}
    ← 4
    2 + 2 = 4

The answer text streams to stdout as the model produces it; each tool call
(``→``, name and canonical JSON arguments) and its result (``←``, truncated)
gets a line of its own, so the final answer always starts on a fresh line.
``--json`` prints nothing but one JSON object once the run has ended.
"""

from __future__ import annotations

import json
import sys
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from koboi.approval import Approver, canonical_arguments
from koboi.events import (
    AgentEvent,
    FinalEvent,
    RunResult,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi_cli import host
from koboi_cli.approver import AssumeYesApprover, TerminalApprover
from koboi_cli.style import Style, err, write

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent

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

    def _line(self, text: str) -> None:
        """A line of its own, even if the answer text stopped mid-line."""
        prefix = "" if self._at_line_start else "\n"
        write(self.out, f"{prefix}{text}\n")
        self._at_line_start = True

    def handle(self, event: AgentEvent) -> None:
        s = self.style
        if isinstance(event, TextDeltaEvent):
            if event.text:
                write(self.out, event.text)
                self._at_line_start = event.text.endswith("\n")
        elif isinstance(event, ToolCallEvent):
            call = event.call
            arguments = (
                call.raw_arguments
                if call.raw_arguments is not None
                else canonical_arguments(call.arguments)
            )
            self._line(f"{s.cyan('→')} {s.bold(call.name)} {s.dim(arguments)}")
        elif isinstance(event, ToolResultEvent):
            body = _indent(shorten(event.content))
            if event.refused_by:
                self.refused_for_approval += event.refused_by == "approval"
                label = s.yellow(f"refused by {event.refused_by}:")
                self._line(f"{s.yellow('←')} {label} {body}")
            elif event.is_error:
                self._line(f"{s.red('←')} {s.red('error:')} {body}")
            else:
                self._line(f"{s.green('←')} {s.dim(body)}")

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
        "steps": result.steps,
        "error": result.error,
    }


async def stream_run(
    agent: KoboiAgent, message: str, *, session_id: str | None, printer: EventPrinter | None
) -> RunResult:
    """Run the agent, handing every event to ``printer``; return the final result."""
    result: RunResult | None = None
    async with agent, aclosing(agent.stream(message, session_id=session_id)) as events:
        async for event in events:
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


def run(
    config: Path,
    message: str,
    *,
    as_json: bool,
    session_id: str | None,
    assume_yes: bool,
) -> int:
    """Run once; return the exit code (0 only when the run completed)."""
    from koboi.agent import KoboiAgent

    approver = choose_approver(assume_yes=assume_yes)
    agent = KoboiAgent.from_config(config, host=host.get_host(), approver=approver)
    printer = None if as_json else EventPrinter(sys.stdout, Style(sys.stdout))
    result = anyio.run(_run_async, agent, message, session_id, printer)
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
    agent: KoboiAgent, message: str, session_id: str | None, printer: EventPrinter | None
) -> RunResult:
    return await stream_run(agent, message, session_id=session_id, printer=printer)
