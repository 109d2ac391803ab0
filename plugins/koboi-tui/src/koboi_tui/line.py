"""``koboi chat --no-tui``: the same conversation as a line-mode REPL.

Used when stdout is not a terminal (a pipe, a log, a dumb terminal) or when asked.
Each line read is a message, or a command starting with ``/`` (``/help`` lists
them); the answer streams as it comes, each tool call and result on a line of its
own. An approval reads its answer from the next input line (``y``, ``n`` or ``a``;
end of input is a no). Ctrl-C (SIGINT) cancels the run in progress and keeps the
session; end of input or ``/quit`` leaves.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel

from koboi.approval import ApprovalRequest
from koboi.errors import KoboiError
from koboi.events import (
    AgentEvent,
    ChildEvent,
    FinalEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi_cli.api import mask_secrets, write
from koboi_tui import render
from koboi_tui.approver import Answer, ChatApprover
from koboi_tui.controller import ChatController, RunEnd
from koboi_tui.diffs import edit_diff

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost

HELP = """commands:
  /new             start a new session
  /sessions        list the sessions of the store
  /resume REF      continue a session (id, unique prefix, or 'last')
  /mode MODE       switch mode (chat, plan, act, auto, yolo)
  /journal         show the current session's journal
  /capture FILE    freeze the current session into a bundle (koboi-replay)
  /status          model, mode, session, tokens and cost
  /quit            leave (end of input does too)
Ctrl-C cancels the run in progress; the session stays.
"""


class LinePrinter:
    """Writes a run's events as lines, as they arrive."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._at_line_start = True
        self._streamed = False

    def line(self, text: str) -> None:
        prefix = "" if self._at_line_start else "\n"
        write(self.out, f"{prefix}{text}\n")
        self._at_line_start = True

    def handle(self, event: AgentEvent, label: str = "") -> None:
        if isinstance(event, ChildEvent):
            self.handle(event.event, f"{label}[{event.tag or event.session_id[:8]}] ")
        elif isinstance(event, TextDeltaEvent):
            if event.text and not label:
                write(self.out, event.text)
                self._at_line_start = event.text.endswith("\n")
                self._streamed = True
        elif isinstance(event, ToolCallEvent):
            self.line(label + render.tool_call_text(event.call))
        elif isinstance(event, ToolResultEvent):
            self.line(label + render.tool_result_text(event).replace("\n", "\n  "))
        elif isinstance(event, FinalEvent) and not label:
            output = event.result.output.strip()
            if output and not self._streamed:
                self.line(output)

    def finish(self) -> None:
        if not self._at_line_start:
            write(self.out, "\n")
        self._at_line_start, self._streamed = True, False


class LineChat:
    """The REPL over a :class:`ChatController`."""

    def __init__(self, inp: TextIO, out: TextIO) -> None:
        self.inp, self.out = inp, out
        self.printer = LinePrinter(out)
        self.controller: ChatController | None = None
        self._lines_in, self._lines_out = anyio.create_memory_object_stream[str | None](16)
        self._eof = False

    async def ask(self, request: ApprovalRequest) -> Answer:
        """The approval question, answered by the next input line."""
        self.printer.finish()
        write(
            self.out,
            f"approval needed: {request.tool_name} (risk: {request.risk.value}) - "
            f"{mask_secrets(request.reason)}\n"
            f"  arguments: {render.shown_arguments(request)}\n",
        )
        controller = self.controller
        workdir = controller.agent.sandbox.workdir_for(request.session_id) if controller else None
        diff = edit_diff(request.display_arguments, workdir)
        if diff:
            write(self.out, "  diff:\n" + "".join(f"    {d}\n" for d in diff.splitlines()))
        while True:
            write(self.out, "approve? [y]es / [n]o / [a]lways: ")
            line = await self._read()
            if line is None:
                write(self.out, "\n")
                return "no"
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                return "yes"
            if answer in ("a", "always"):
                return "always"
            if answer in ("", "n", "no"):
                return "no"
            write(self.out, f"please answer y, n or a (got {answer!r})\n")

    async def _read(self) -> str | None:
        """The next input line; None at end of input."""
        if self._eof:
            return None
        line = await self._lines_out.receive()
        self._eof = line is None
        return line

    def _start_reader(self) -> None:
        """One reader for the whole session, in a daemon thread: a question cancelled by
        Ctrl-C never leaves a read behind that would swallow the next line, and leaving
        with /quit never waits for a line that will not come."""
        token = anyio.lowlevel.current_token()

        def read() -> None:
            while True:
                line = self.inp.readline()
                try:
                    anyio.from_thread.run(self._lines_in.send, line or None, token=token)
                except Exception:  # the chat is over: nobody reads any more
                    return
                if not line:
                    return

        threading.Thread(target=read, name="koboi-chat-input", daemon=True).start()

    async def main(self, controller: ChatController, session: str | None) -> int:
        self.controller = controller
        async with anyio.create_task_group() as group:
            group.start_soon(controller.serve)
            self._start_reader()
            try:
                await controller.wait_ready()
                group.start_soon(self._interrupts, controller)
                if session is not None:
                    await self._attach(controller, session)
                write(
                    self.out,
                    f"koboi chat - {controller.model} - mode {controller.mode} "
                    "(/help for commands)\n",
                )
                await self._loop(controller)
            finally:
                controller.close()
                group.cancel_scope.cancel()
        return 0

    async def _interrupts(self, controller: ChatController) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if not controller.cancel():
                    self.printer.line("(nothing to cancel; /quit or end of input leaves)")

    async def _loop(self, controller: ChatController) -> None:
        while True:
            write(self.out, "> ")
            line = await self._read()
            if line is None:
                write(self.out, "\n")
                return
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if not await self._command(controller, text):
                        return
                else:
                    self._ended(await controller.send(text, self.printer.handle))
            except KoboiError as exc:
                self.printer.line(f"error: {exc}")

    def _ended(self, end: RunEnd) -> None:
        self.printer.finish()
        if end.cancelled:
            self.printer.line("(cancelled; the session is kept)")
        elif end.result is not None and end.result.outcome != "completed":
            why = end.result.error or ""
            self.printer.line(f"(run ended: {end.result.outcome}{': ' + why if why else ''})")

    async def _attach(self, controller: ChatController, ref: str) -> None:
        attached = await controller.attach(ref)
        write(self.out, f"session {attached.session_id} ({len(attached.messages)} messages)\n")
        for message in attached.messages[-6:]:
            said = (message.content or "").strip()
            if said:
                write(
                    self.out, f"  {message.role}: {render.shorten(mask_secrets(said), lines=3)}\n"
                )
        if attached.interrupted:
            write(self.out, "its last run was interrupted: finishing it\n")
            self._ended(await controller.resume(self.printer.handle))

    async def _command(self, controller: ChatController, text: str) -> bool:
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            write(self.out, HELP)
        elif name == "/new":
            controller.new_session()
            write(self.out, "new session: the next message starts it\n")
        elif name == "/sessions":
            for row in await controller.sessions():
                write(
                    self.out,
                    f"  {row.info.id[:12]}  {row.info.status:<11} "
                    f"{render.tokens_text(row.totals):>22}  {render.cost_text(row.totals.cost_usd)}"
                    f"  {render.session_title(row.info, row.first_input)}\n",
                )
        elif name == "/resume":
            await self._attach(controller, arg or "last")
        elif name == "/mode":
            await controller.switch_mode(arg)
            write(self.out, f"mode is now {controller.mode}\n")
        elif name == "/journal":
            for event in await controller.journal():
                write(self.out, render.journal_line(event) + "\n")
        elif name == "/capture":
            if not arg:
                write(self.out, "usage: /capture FILE\n")
            else:
                write(self.out, await controller.capture(Path(arg)) + "\n")
        elif name == "/status":
            totals = await controller.totals()
            write(
                self.out,
                f"model {controller.model} - mode {controller.mode} - session "
                f"{controller.session_id or '(new)'} - {render.tokens_text(totals)} - "
                f"{render.cost_text(totals.cost_usd)}\n",
            )
        else:
            write(self.out, f"unknown command {name!r} (/help lists them)\n")
        return True


def run_line_chat(
    config: AgentConfig,
    host: PluginHost,
    session: str | None,
    *,
    inp: TextIO | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the REPL until end of input or ``/quit``; return the exit code."""
    chat = LineChat(inp or sys.stdin, out or sys.stdout)
    controller = ChatController(config, host, ChatApprover(chat.ask))
    return anyio.run(chat.main, controller, session)
