"""Snapshots of the main screens at 80x24, as text (tests/snapshots/*.txt).

Each snapshot is the screen read from Textual's SVG screenshot; the SVG is kept
beside it for a look at the colours. Ids that change from run to run are blanked.
``KOBOI_UPDATE_SNAPSHOTS=1`` rewrites them after a deliberate change of the UI.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from chat_pilot import idle, ready, say, screen_text, texts, wait_for
from textual.pilot import Pilot

from koboi_tui.app import ApprovalPanel, ChatApp, JournalScreen, SessionsScreen

pytestmark = pytest.mark.anyio

SNAPSHOTS = Path(__file__).parent / "snapshots"


async def check_snapshot(pilot: Pilot[None], name: str) -> None:
    app = pilot.app
    assert isinstance(app, ChatApp)
    # A blinking cursor would make the screen depend on the moment it is taken.
    for widget in app.screen.query("Input, TextArea"):
        widget.cursor_blink = False  # type: ignore[attr-defined]
    await pilot.pause(0.2)
    shown = screen_text(app)
    text_file, svg_file = SNAPSHOTS / f"{name}.txt", SNAPSHOTS / f"{name}.svg"
    if os.environ.get("KOBOI_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        text_file.write_text(shown, encoding="utf-8")
        svg_file.write_text(app.export_screenshot(title=name), encoding="utf-8")
        return
    if not text_file.exists():
        pytest.fail(f"no snapshot {text_file.name}: run with KOBOI_UPDATE_SNAPSHOTS=1 to make it")
    kept = text_file.read_text(encoding="utf-8")
    if shown != kept:
        diff = "\n".join(
            difflib.unified_diff(
                kept.splitlines(), shown.splitlines(), "snapshot", "now", lineterm=""
            )
        )
        pytest.fail(f"screen {name!r} differs from its snapshot:\n{diff}")


async def test_the_conversation_after_a_tool_call(make_app: Callable[..., ChatApp]) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "what is 2 + 3")
        await wait_for(pilot, lambda: "2 + 3 = 5" in texts(app) and idle(app), "the answer")
        await check_snapshot(pilot, "conversation")


async def test_an_approval_with_a_diff(make_app: Callable[..., ChatApp], chat_config: Path) -> None:
    (chat_config.parent / "work" / "todo.txt").write_text("milk\neggs\n", encoding="utf-8")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await say(pilot, "edit todo.txt: eggs -> bread")
        await wait_for(pilot, lambda: app.query(ApprovalPanel), "the approval")
        await check_snapshot(pilot, "approval")
        await pilot.press("n")
        await wait_for(pilot, lambda: idle(app), "the run to end")


async def test_the_session_list_and_the_journal(make_app: Callable[..., ChatApp]) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        for question, answer in (("what is 1 + 2", "1 + 2 = 3"), ("what is 7 * 6", "7 * 6 = 42")):
            await say(pilot, "/new")
            await say(pilot, question)
            await wait_for(pilot, lambda a=answer: a in texts(app) and idle(app), "the answer")
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), "the list")
        await wait_for(pilot, lambda: app.screen.query_one("#sessions").row_count == 2, "rows")  # type: ignore[attr-defined]
        await check_snapshot(pilot, "sessions")
        await pilot.press("escape")
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen), "the journal")
        await check_snapshot(pilot, "journal")
