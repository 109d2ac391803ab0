"""``koboi chat`` driven headless with Textual's pilot: the real app, agent, store and tools."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from chat_pilot import idle, ready, say, texts, wait_for

from koboi import journal as J
from koboi.store import JournalEvent
from koboi_tui.app import ApprovalPanel, ChatApp, SessionsScreen, ToolView

pytestmark = pytest.mark.anyio


async def journal_of(app: ChatApp) -> list[JournalEvent]:
    return await app.controller.journal()


async def test_a_tool_call_and_an_approval_with_a_diff(
    make_app: Callable[..., ChatApp], chat_config: Path
) -> None:
    notes = chat_config.parent / "work" / "notes.txt"
    notes.write_text("first line\nold line\nlast line\n", encoding="utf-8")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "what is 2 + 3", typed=True)
        await wait_for(pilot, lambda: "2 + 3 = 5" in texts(app) and idle(app), "the answer")
        tool = app.query(ToolView).first()
        assert tool.text == '→ calculator {"expression":"2 + 3"}\n← 5'

        await say(pilot, "edit notes.txt: old line -> new line")
        await wait_for(pilot, lambda: app.query(ApprovalPanel), "the approval")
        panel = app.query_one(ApprovalPanel)
        assert panel.request.tool_name == "edit_file"
        assert json.loads(panel.query_one(".approval-arguments").render().plain) == {
            "new_text": "new line",
            "old_text": "old line",
            "path": "notes.txt",
        }
        # The diff is of the file as it is, with the edit applied.
        assert panel.diff is not None
        assert "-old line" in panel.diff and "+new line" in panel.diff
        assert " first line" in panel.diff
        assert app.focused is panel and app.state == "approval?"
        assert notes.read_text() == "first line\nold line\nlast line\n"  # nothing ran yet

        await pilot.press("y")
        await wait_for(pilot, lambda: idle(app), "the run to end")
        assert notes.read_text() == "first line\nnew line\nlast line\n"
        assert panel.has_class("settled") and panel.border_title == "approval: approved"
        decided = [e for e in await journal_of(app) if e.type == "approval_decided"]
        assert [(e.data["approved"], e.data["decided_by"]) for e in decided] == [(True, "chat")]

        # "always": the next identical call is not asked again; "no" refuses the call.
        await say(pilot, "write a.txt: hello")
        await wait_for(pilot, lambda: len(app.query(ApprovalPanel)) == 2, "the 2nd approval")
        await pilot.press("a")
        await wait_for(pilot, lambda: idle(app), "the run to end")
        await say(pilot, "write a.txt: hello")
        await wait_for(pilot, lambda: idle(app) and len(app.query(ToolView)) == 4, "the rerun")
        assert len(app.query(ApprovalPanel)) == 2
        await say(pilot, "write b.txt: no")
        await wait_for(pilot, lambda: len(app.query(ApprovalPanel)) == 3, "the 3rd approval")
        await pilot.press("n")
        await wait_for(pilot, lambda: idle(app), "the run to end")
        assert not (chat_config.parent / "work" / "b.txt").exists()
        assert (
            app.query(ToolView)
            .last()
            .text.splitlines()[-1]
            .startswith("← refused by approval: the user did not approve 'write_file'")
        )
        status = str(app.query_one("#status").render())
        assert status.startswith(f"scripted:demo │ act │ {app.controller.session_id[:8]} │")
        totals = J.totals_of(await journal_of(app))
        assert f"{totals.input_tokens:,}↑ {totals.output_tokens:,}↓" in status


async def test_ctrl_c_cancels_the_run_and_keeps_the_session(
    make_app: Callable[..., ChatApp], chat_config: Path
) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "write c.txt: never")
        await wait_for(pilot, lambda: app.query(ApprovalPanel), "the approval")
        session = app.controller.session_id
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: idle(app), "the run to stop")
        panel = app.query_one(ApprovalPanel)
        assert panel.border_title == "approval: not answered (cancelled)"
        assert not (chat_config.parent / "work" / "c.txt").exists()
        finished = [e for e in await journal_of(app) if e.type == "run_finished"]
        assert [e.data["outcome"] for e in finished] == ["cancelled"]

        # The conversation goes on in the same session.
        await say(pilot, "what is 4 * 5")
        await wait_for(pilot, lambda: "4 * 5 = 20" in texts(app) and idle(app), "the answer")
        assert app.controller.session_id == session
        state = J.fold_state(await journal_of(app))
        assert state.last_outcome == "completed" and not state.interrupted
        assert [m.content for m in state.messages if m.role == "user"] == [
            "write c.txt: never",
            "what is 4 * 5",
        ]


async def test_resume_a_session_from_the_session_list(make_app: Callable[..., ChatApp]) -> None:
    first = make_app()
    async with first.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "what is 6 * 7")
        await wait_for(pilot, lambda: "6 * 7 = 42" in texts(first) and idle(first), "the answer")
        kept = first.controller.session_id
        await say(pilot, "/new")
        await say(pilot, "what is 1 + 1")
        await wait_for(pilot, lambda: "1 + 1 = 2" in texts(first) and idle(first), "the answer")
        other = first.controller.session_id
    assert kept and other and kept != other

    # A new `koboi chat`: the session list shows both, newest first; open the older one.
    second = make_app()
    async with second.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(second.screen, SessionsScreen), "the list")
        table: Any = second.screen.query_one("#sessions")
        await wait_for(pilot, lambda: table.row_count == 2, "the sessions")
        assert [table.get_row_at(i)[0] for i in range(2)] == [other[:12], kept[:12]]
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: second.controller.session_id == kept, "the session")
        await wait_for(pilot, lambda: "6 * 7 = 42" in texts(second), "the history")
        assert texts(second) == [
            "what is 6 * 7",
            '→ calculator {"expression":"6 * 7"}\n← 42',
            "6 * 7 = 42",
        ]
        await say(pilot, "what is 2 * 2")
        await wait_for(pilot, lambda: "2 * 2 = 4" in texts(second) and idle(second), "answer")
        state = J.fold_state(await second.controller.journal())
        assert [m.content for m in state.messages if m.role == "user"] == [
            "what is 6 * 7",
            "what is 2 * 2",
        ]


async def test_mode_switch_from_the_palette_and_copy(make_app: Callable[..., ChatApp]) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"Mode: chat")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.controller.mode == "chat" and idle(app), "the switch")
        assert " │ chat │ " in str(app.query_one("#status").render())
        await say(pilot, "write d.txt: x")
        await wait_for(pilot, lambda: idle(app) and app.query(ToolView), "the refusal")
        assert not app.query(ApprovalPanel)  # chat mode refuses, it never asks
        assert "refused by mode" in app.query(ToolView).last().text
        # Copy a message: focus it, press c.
        answer = texts(app)[-1]
        app.query("MessageView.role-assistant").last().focus()
        await pilot.press("c")
        assert app.clipboard == answer


async def test_journal_and_capture(make_app: Callable[..., ChatApp], chat_config: Path) -> None:
    from koboi_replay import read_bundle

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "what is 3 + 3")
        await wait_for(pilot, lambda: "3 + 3 = 6" in texts(app) and idle(app), "the answer")
        await pilot.press("f3")
        await wait_for(pilot, lambda: app.screen.query("#journal"), "the journal")
        shown = app.screen.query_one("#journal").text  # type: ignore[attr-defined]
        assert shown.splitlines()[0].split()[:2] == ["1", "run_started"]
        assert "tool_call_finished" in shown and "run_finished" in shown
        await pilot.press("escape")
        bundle = chat_config.parent / "out.koboi"
        await say(pilot, f"/capture {bundle}")
        await wait_for(pilot, lambda: bundle.exists(), "the bundle")
        assert read_bundle(bundle).manifest["contents"]["runs"] == 1


async def test_an_agent_that_cannot_open_ends_the_app_with_one_line(tmp_path: Path) -> None:
    from koboi.config import load_config
    from koboi_cli.api import get_host

    config = tmp_path / "bad.yaml"
    config.write_text(
        "agent: {mode: act}\nllm: {provider: scripted}\nstore: {url: 'sqlite:///nope/x/y.db'}\n"
    )
    (tmp_path / "nope").write_text("a file where a directory should be")
    host = get_host()
    app = ChatApp(load_config(config, host.catalog()), host)
    async with app.run_test(size=(80, 24)) as pilot:
        with anyio.fail_after(15):
            while app.is_running:
                await pilot.pause(0.05)
    assert app.fatal is not None and "\n" not in app.fatal


@pytest.fixture
def one_second_approvals(chat_config: Path) -> Path:
    text = chat_config.read_text().replace(
        "  mode: act\n", "  mode: act\n  approval_timeout_seconds: 1\n"
    )
    chat_config.write_text(text)
    return chat_config


async def test_an_approval_nobody_answers_in_time_is_a_no(
    make_app: Callable[..., ChatApp], one_second_approvals: Path
) -> None:
    chat_config = one_second_approvals
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "write late.txt: too late")
        await wait_for(pilot, lambda: app.query(ApprovalPanel), "the approval")
        await wait_for(pilot, lambda: idle(app), "the deadline")
        assert app.query_one(ApprovalPanel).border_title == "approval: not answered in time"
        assert "refused by approval" in app.query(ToolView).last().text
        assert not (chat_config.parent / "work" / "late.txt").exists()


@pytest.fixture
def crashed_session(chat_config: Path) -> str:
    """A session whose chat was killed (SIGKILL) while an approval waited."""
    from chat_process import Chat

    killed = Chat(chat_config, "--no-tui")
    killed.send("write e.txt: survived")
    killed.wait_for("approve? [y]es / [n]o / [a]lways: ")
    killed.kill()
    return "last"


async def test_a_crashed_session_opened_from_the_list_finishes_its_run(
    make_app: Callable[..., ChatApp], chat_config: Path, crashed_session: str
) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), "the list")
        table: Any = app.screen.query_one("#sessions")
        await wait_for(pilot, lambda: table.row_count == 1, "the session")
        assert table.get_row_at(0)[1] == "running"  # nobody finished it
        await pilot.press("enter")
        # The interrupted run is finished first: its approval is asked again.
        await wait_for(pilot, lambda: app.query(ApprovalPanel), "the approval, again")
        await pilot.press("y")
        await wait_for(pilot, lambda: idle(app), "the run to end")
        assert (chat_config.parent / "work" / "e.txt").read_text() == "survived"
        events = await journal_of(app)
        kinds = [e.type for e in events]
        assert kinds.count("approval_requested") == 1 and kinds.count("run_resumed") == 1
        assert J.fold_state(events).last_outcome == "completed"
