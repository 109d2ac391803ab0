"""The Textual application of ``koboi chat``.

One screen: the conversation (messages, tool calls with their results, approvals
asked inline), the prompt, and a status line (model, mode, session, tokens, cost,
what is happening). Screens on top: the session list, the journal, the modes.
Everything the agent does goes through :class:`~koboi_tui.controller.ChatController`;
this module only shows it.

Keys: Enter sends, Ctrl-C cancels the run in progress (or copies the selected
text), Ctrl-P the command palette, Ctrl-N a new session, F2 the sessions, F3 the
journal, F4 the modes, Tab moves between messages, ``c`` copies the focused
message, Ctrl-Q quits. Within an approval: ``y``, ``n``, ``a`` (or the buttons).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Input, OptionList, Static, TextArea

from koboi.approval import ApprovalRequest
from koboi.config import MODE_ORDER
from koboi.errors import KoboiError
from koboi.events import (
    AgentEvent,
    ChildEvent,
    FinalEvent,
    StepEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from koboi.messages import Message, Usage
from koboi.store import SessionTotals
from koboi_cli.api import mask_secrets
from koboi_tui import render
from koboi_tui.approver import Answer, ChatApprover
from koboi_tui.controller import ChatController, RunEnd
from koboi_tui.diffs import edit_diff

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost

#: How often a streaming answer is redrawn at most (seconds): tokens arriving faster
#: are drawn together, so typing stays responsive during a long stream.
STREAM_REDRAW = 0.05


class MessageView(Static, can_focus=True):
    """One message of the conversation: focus it and press ``c`` to copy it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("c", "copy", "Copy message")]

    def __init__(self, role: str, text: str = "", **kwargs: Any) -> None:
        super().__init__(markup=False, **kwargs)
        self.role = role
        self.text = text
        self._pending = False
        self.add_class(f"role-{role}")
        self.border_title = {"user": "you", "assistant": "agent"}.get(role, role)
        self._draw()

    def append(self, text: str) -> None:
        """Add streamed text; drawn at most every :data:`STREAM_REDRAW` seconds."""
        self.text += text
        if not self._pending:
            self._pending = True
            self.set_timer(STREAM_REDRAW, self.flush)

    def set_text(self, text: str) -> None:
        self.text = text
        self._draw()

    def flush(self) -> None:
        self._pending = False
        self._draw()

    def _draw(self) -> None:
        self.update(Text(self.text or "…"))

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.text)
        self.app.notify("message copied to the clipboard", timeout=2)


class ToolView(MessageView):
    """A tool call, then its result under it."""

    def __init__(self, call_text: str, **kwargs: Any) -> None:
        super().__init__("tool", call_text, **kwargs)
        self.border_title = "tool"

    def result(self, text: str, *, failed: bool) -> None:
        self.set_text(f"{self.text}\n{text}")
        if failed:
            self.add_class("failed")


class NoteView(Static):
    """Something the chat itself says (a session opened, a run cancelled...)."""

    def __init__(self, text: str, **kwargs: Any) -> None:
        super().__init__(Text(text), **kwargs)


class ApprovalPanel(Vertical, can_focus=True):
    """An approval asked inline: the tool, its risk, why, its arguments, a diff for a
    file edit, and yes / no / always."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('yes')", "Yes"),
        Binding("n", "answer('no')", "No"),
        Binding("a", "answer('always')", "Always"),
    ]

    def __init__(self, request: ApprovalRequest, diff: str | None) -> None:
        super().__init__()
        self.request = request
        self.diff = diff
        self.answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.border_title = "approval needed"

    def compose(self) -> ComposeResult:
        r = self.request
        yield Static(
            Text.assemble(
                (r.tool_name, "bold"),
                f" (risk: {r.risk.value}) - {mask_secrets(r.reason)}",
            ),
            classes="approval-title",
        )
        yield Static(Text(render.approval_arguments(r)), classes="approval-arguments")
        if self.diff:
            yield Static(Syntax(self.diff, "diff", theme="ansi_dark"), classes="approval-diff")
        with Horizontal(classes="approval-buttons"):
            yield Button("Yes (y)", id="yes", variant="success")
            yield Button("No (n)", id="no", variant="error")
            yield Button("Always (a)", id="always", variant="warning")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id in ("yes", "no", "always"):
            self.action_answer(event.button.id)

    def action_answer(self, answer: str) -> None:
        if self.answer.done():
            return
        self.answer.set_result(answer)  # type: ignore[arg-type]
        self.settle({"yes": "approved", "no": "denied", "always": "approved (always)"}[answer])

    def settle(self, outcome: str) -> None:
        """Replace the buttons by what was decided."""
        for buttons in self.query(".approval-buttons"):
            buttons.remove()
        self.mount(Static(Text(outcome, style="bold"), classes="approval-outcome"))
        self.border_title = f"approval: {outcome}"
        self.add_class("settled")
        self.can_focus = False


class SessionsScreen(ModalScreen[str | None]):
    """The store's sessions: Enter opens one, Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Back")]

    def __init__(self, controller: ChatController) -> None:
        super().__init__()
        self.controller = controller

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Sessions - Enter opens, Escape goes back", classes="dialog-title")
            yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)

    async def on_mount(self) -> None:
        table: DataTable[str] = self.query_one(DataTable)
        table.add_columns("session", "status", "tokens", "cost", "first message")
        for row in await self.controller.sessions():
            table.add_row(
                row.info.id[:12],
                str(row.info.status),
                f"{row.totals.total_tokens:,}",
                render.cost_text(row.totals.cost_usd),
                render.session_title(row.info, row.first_input),
                key=row.info.id,
            )
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(event.row_key.value)


class JournalScreen(ModalScreen[None]):
    """The current session's journal, one event per line (select and copy freely)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Back")]

    def __init__(self, lines: list[str], title: str) -> None:
        super().__init__()
        self.lines = lines
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            text = "\n".join(self.lines) or "(no events yet)"
            yield TextArea(text, read_only=True, soft_wrap=False, id="journal")


class ModeScreen(ModalScreen[str | None]):
    """Choose the agent's mode."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Back")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog small"):
            yield Static("Mode - Enter chooses, Escape goes back", classes="dialog-title")
            yield OptionList(
                *[f"{m}{' (current)' if m == self.current else ''}" for m in MODE_ORDER]
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = [str(m) for m in MODE_ORDER].index(self.current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(MODE_ORDER[event.option_index])


class ChatCommands(Provider):
    """The command palette's koboi commands (Ctrl-P)."""

    def _commands(self) -> list[tuple[str, str, Callable[[], Any]]]:
        app = self.app
        assert isinstance(app, ChatApp)
        found: list[tuple[str, str, Callable[[], Any]]] = [
            ("New session", "Start a new session with the next message", app.action_new_session),
            ("Resume a session", "Pick a session of the store to continue", app.action_sessions),
            ("Show the journal", "Every event of the current session", app.action_journal),
            ("Switch mode", "chat, plan, act, auto or yolo", app.action_modes),
        ]
        for mode in MODE_ORDER:
            found.append((f"Mode: {mode}", f"Reopen the agent in mode {mode}", _bind(app, mode)))
        if app.controller.can_capture:
            found.append(
                ("Capture a bundle", "Freeze the session into a .koboi file", app.action_capture)
            )
        found.append(("Copy the last answer", "To the clipboard", app.action_copy_last))
        return found

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


def _bind(app: ChatApp, mode: str) -> Callable[[], None]:
    return lambda: app.choose_mode(mode)


class ChatApp(App[None]):
    """``koboi chat``."""

    TITLE = "koboi chat"
    CSS = """
    Screen { layout: vertical; }
    #conversation { height: 1fr; padding: 0 1; }
    MessageView { border: round $panel; padding: 0 1; margin: 0 0 0 0; height: auto; }
    MessageView:focus { border: round $accent; }
    MessageView.role-user { border: round $primary; }
    MessageView.role-assistant { border: round $success; }
    ToolView { border: round $secondary; color: $text-muted; }
    ToolView.failed { border: round $warning; }
    NoteView { color: $text-muted; padding: 0 1; }
    ApprovalPanel { border: heavy $warning; height: auto; padding: 0 1; }
    ApprovalPanel:focus { border: heavy $accent; }
    ApprovalPanel.settled { border: round $panel; }
    .approval-buttons { height: auto; }
    .approval-buttons Button { margin-right: 1; min-width: 12; }
    .approval-diff { margin: 1 0; }
    #prompt { height: 3; }
    #status { height: 1; background: $panel; padding: 0 1; }
    .dialog { width: 100%; height: 100%; border: round $accent; padding: 0 1; }
    .dialog.small { width: 40; height: 11; }
    ModeScreen { align: center middle; }
    .dialog-title { text-style: bold; height: 1; }
    #sessions, #journal { height: 1fr; }
    """
    COMMANDS = App.COMMANDS | {ChatCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Cancel run", priority=True),
        Binding("ctrl+n", "new_session", "New"),
        Binding("f2", "sessions", "Sessions"),
        Binding("f3", "journal", "Journal"),
        Binding("f4", "modes", "Mode"),
    ]

    def __init__(
        self,
        config: AgentConfig,
        host: PluginHost,
        *,
        session: str | None = None,
        agent_options: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        self.controller = ChatController(
            config, host, ChatApprover(self.ask), agent_options=agent_options
        )
        self.session_ref = session
        #: Why the chat could not start (the agent did not open): shown once it exits.
        self.fatal: str | None = None
        self.state = "starting"
        self._totals = SessionTotals()
        self._live = Usage()
        self._answer: MessageView | None = None
        self._tools: dict[str, ToolView] = {}
        self._last_answer = ""

    # -- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")
        yield Input(placeholder="Message (Enter sends; Ctrl-P: commands)", id="prompt")
        yield Static(id="status", markup=False)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#conversation", VerticalScroll).anchor()
        self.run_worker(self.controller.serve(), name="agent", group="agent")
        self.run_worker(self._start(), name="start", group="start")
        self._draw_status()
        self.query_one("#prompt", Input).focus()

    async def _start(self) -> None:
        try:
            await self.controller.wait_ready()
        except Exception as exc:  # whatever stopped the agent opening: said once the app ends
            known = isinstance(exc, KoboiError)
            self.fatal = str(exc) if known else f"internal error: {type(exc).__name__}: {exc}"
            self.exit()
            return
        self.state = "ready"
        if self.session_ref is not None:
            try:
                await self._open_session(self.session_ref)
            except KoboiError as exc:
                self.note(f"error: {exc}")
        else:
            self.note(f"koboi chat - {self.controller.model} - mode {self.controller.mode}")
        await self._refresh_totals()
        self.query_one("#prompt", Input).focus()

    async def on_unmount(self) -> None:
        self.controller.close()

    # -- the conversation ------------------------------------------------------------

    @property
    def conversation(self) -> VerticalScroll:
        return self.query_one("#conversation", VerticalScroll)

    def note(self, text: str) -> None:
        self.conversation.mount(NoteView(text))

    def _show(self, widget: Static | Vertical) -> None:
        self.conversation.mount(widget)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.state == "starting":
            self.notify("the agent is still starting: send it again in a moment")
            return
        if self.state != "ready" or self.controller.running:
            self.notify("a run is in progress: wait, or cancel it with Ctrl-C", severity="warning")
            return
        event.input.clear()
        if text.startswith("/"):
            await self._command(text)
            return
        self._show(MessageView("user", text))
        self.state = "running"  # now, not when the worker starts: a second Enter waits
        self.run_worker(self._run(self.controller.send(text, self.on_agent_event)), group="run")

    async def _run(self, run: Any) -> None:
        self.state, self._live, self._answer = "running", Usage(), None
        self._draw_status()
        try:
            end: RunEnd = await run
        except KoboiError as exc:
            self.note(f"error: {exc}")
        except Exception as exc:  # a bug must not close the chat: the session stays usable
            self.note(f"internal error: {type(exc).__name__}: {exc}")
        else:
            self._ended(end)
        finally:
            self.state = "ready"
            self._answer = None
            await self._refresh_totals()

    def _ended(self, end: RunEnd) -> None:
        if self._answer is not None:
            self._answer.flush()
        if end.cancelled:
            self.note("cancelled - the session is kept; send the next message when ready")
            return
        result = end.result
        if result is None:
            return
        if result.output and self._answer is None and result.outcome == "completed":
            self._show(MessageView("assistant", result.output))
        if result.output:
            self._last_answer = result.output
        if result.outcome == "suspended":
            self.note("the run waits for your reply: the next message answers it")
        elif result.outcome != "completed":
            self.note(
                f"run ended: {result.outcome}" + (f": {result.error}" if result.error else "")
            )

    def on_agent_event(self, event: AgentEvent) -> None:
        """Show one event of the run, as it arrives."""
        if isinstance(event, ChildEvent):
            self._child(event)
        elif isinstance(event, TextDeltaEvent):
            if self._answer is None:
                self._answer = MessageView("assistant")
                self._show(self._answer)
            self._answer.append(event.text)
        elif isinstance(event, ToolCallEvent):
            if self._answer is not None:
                self._answer.flush()
            self._answer = None
            view = ToolView(render.tool_call_text(event.call))
            self._tools[event.call.id] = view
            self._show(view)
        elif isinstance(event, ToolResultEvent):
            text = render.tool_result_text(event)
            failed = event.is_error or bool(event.refused_by)
            shown = self._tools.pop(event.call_id, None)
            if shown is None:
                self._show(ToolView(f"{event.name}\n{text}"))
            else:
                shown.result(text, failed=failed)
        elif isinstance(event, StepEvent):
            self._live = self._live + event.usage
            self._draw_status()
        elif isinstance(event, FinalEvent) and event.result.output:
            self._last_answer = event.result.output

    def _child(self, event: ChildEvent) -> None:
        label = event.tag or event.session_id[:8]
        inner = event.event
        if isinstance(inner, ToolCallEvent):
            self._show(ToolView(f"[{label}] {render.tool_call_text(inner.call)}"))
        elif isinstance(inner, ToolResultEvent):
            self._show(ToolView(f"[{label}] {render.tool_result_text(inner)}"))
        elif isinstance(inner, FinalEvent):
            self.note(f"[{label}] done: {render.shorten(inner.result.output or '-', lines=2)}")

    async def ask(self, request: ApprovalRequest) -> Answer:
        """The approver's question, asked inline; waits for the answer."""
        if self._answer is not None:
            self._answer.flush()
            self._answer = None
        workdir = self.controller.agent.sandbox.workdir_for(request.session_id)
        panel = ApprovalPanel(request, edit_diff(request.display_arguments, workdir))
        await self.conversation.mount(panel)
        panel.focus()
        self.state = "approval?"
        self._draw_status()
        try:
            return await panel.answer
        except BaseException:
            # Cancelled: by Ctrl-C, or by the approval's deadline (the kernel then denies
            # the call). Awaiting the future cancelled it too.
            if not panel.has_class("settled"):
                cancelled = self.state == "cancelling"
                panel.settle("not answered (cancelled)" if cancelled else "not answered in time")
            raise
        finally:
            self.state = "running"
            self._draw_status()
            self.query_one("#prompt", Input).focus()

    def show_history(self, messages: Iterable[Message]) -> None:
        """Draw a session's conversation as the journal holds it."""
        calls: dict[str, ToolView] = {}
        for message in messages:
            if message.role == "user":
                self._show(MessageView("user", message.content))
            elif message.role == "assistant":
                if message.content:
                    self._show(MessageView("assistant", message.content))
                    self._last_answer = message.content
                for call in message.tool_calls:
                    calls[call.id] = ToolView(render.tool_call_text(call))
                    self._show(calls[call.id])
            elif message.role == "tool":
                body = render.shorten(mask_secrets(message.content)) or "(empty)"
                shown = calls.get(message.tool_call_id or "")
                if shown is not None:
                    shown.result(f"← {body}", failed=message.is_error)

    # -- status --------------------------------------------------------------------

    async def _refresh_totals(self) -> None:
        with contextlib.suppress(KoboiError):
            self._totals = await self.controller.totals()
        self._live = Usage()
        self._draw_status()

    def _draw_status(self) -> None:
        c = self.controller
        totals = self._totals
        tokens_in = totals.input_tokens + self._live.input_tokens
        tokens_out = totals.output_tokens + self._live.output_tokens
        session = c.session_id[:8] if c.session_id else "new"
        text = (
            f"{c.model} │ {c.mode} │ {session} │ {tokens_in:,}↑ {tokens_out:,}↓ │ "
            f"{render.cost_text(totals.cost_usd)} │ {self.state}"
        )
        self.query_one("#status", Static).update(Text(text))

    # -- actions -------------------------------------------------------------------

    def action_interrupt(self) -> None:
        """Ctrl-C: cancel the run in progress; else copy the selected text."""
        if self.controller.cancel():
            self.state = "cancelling"
            self._draw_status()
            return
        selected = self.screen.get_selected_text()
        if selected:
            self.copy_to_clipboard(selected)
            self.notify("selection copied to the clipboard", timeout=2)
            return
        self.notify("nothing to cancel; Ctrl-Q quits", timeout=3)

    def action_copy_last(self) -> None:
        if self._last_answer:
            self.copy_to_clipboard(self._last_answer)
            self.notify("last answer copied to the clipboard", timeout=2)

    def action_new_session(self) -> None:
        try:
            self.controller.new_session()
        except KoboiError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.conversation.remove_children()
        self._tools.clear()
        self._last_answer = ""
        self.note("new session: the next message starts it")
        self._totals = SessionTotals()
        self._draw_status()

    def action_sessions(self) -> None:
        if self.state == "starting":
            self.notify("the agent is still starting: send it again in a moment")
            return
        if self.controller.running:
            self.notify("a run is in progress: cancel it (Ctrl-C) first", severity="warning")
            return

        def chosen(session_id: str | None) -> None:
            if session_id:
                self.run_worker(self._open_and_show(session_id), group="run")

        self.push_screen(SessionsScreen(self.controller), chosen)

    async def _open_and_show(self, ref: str) -> None:
        try:
            await self._open_session(ref)
        except KoboiError as exc:
            self.note(f"error: {exc}")
        await self._refresh_totals()

    async def _open_session(self, ref: str) -> None:
        attached = await self.controller.attach(ref)
        await self.conversation.remove_children()
        self._tools.clear()
        self.note(f"session {attached.session_id} ({len(attached.messages)} messages)")
        self.show_history(attached.messages)
        if attached.interrupted:
            self.note("its last run was interrupted: finishing it")
            await self._run(self.controller.resume(self.on_agent_event))
        elif attached.suspended:
            self.note("its last run waits for your reply: the next message answers it")
        self._draw_status()

    async def action_journal(self) -> None:
        events = await self.controller.journal()
        width = max(80, self.size.width * 3)
        lines = [render.journal_line(e, width) for e in events]
        sid = self.controller.session_id or "new session"
        title = f"Journal of {sid} ({len(events)} events) - Escape goes back"
        self.push_screen(JournalScreen(lines, title))

    def action_modes(self) -> None:
        def chosen(mode: str | None) -> None:
            if mode:
                self.choose_mode(mode)

        self.push_screen(ModeScreen(self.controller.mode), chosen)

    def choose_mode(self, mode: str) -> None:
        self.run_worker(self._switch_mode(mode), group="mode")

    async def _switch_mode(self, mode: str) -> None:
        try:
            await self.controller.switch_mode(mode)
        except KoboiError as exc:
            self.note(f"error: {exc}")
        else:
            self.note(f"mode is now {self.controller.mode}")
        self._draw_status()

    def action_capture(self) -> None:
        sid = self.controller.session_id
        name = f"session-{sid[:12]}.koboi" if sid else "session.koboi"
        self.run_worker(self._capture(Path(name)), group="capture")

    async def _capture(self, output: Path) -> None:
        try:
            self.note(await self.controller.capture(output))
        except KoboiError as exc:
            self.note(f"error: {exc}")

    async def _command(self, text: str) -> None:
        """The line mode's slash commands, typed in the prompt."""
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        if name in ("/quit", "/exit"):
            self.exit()
        elif name == "/new":
            self.action_new_session()
        elif name == "/sessions":
            self.action_sessions()
        elif name == "/resume":
            await self._open_and_show(arg or "last")
        elif name == "/mode":
            await self._switch_mode(arg)
        elif name == "/journal":
            await self.action_journal()
        elif name == "/capture":
            await self._capture(Path(arg) if arg else Path("session.koboi"))
        else:
            self.note(
                f"unknown command {name!r}: /new /sessions /resume REF /mode MODE /journal "
                "/capture FILE /quit"
            )
