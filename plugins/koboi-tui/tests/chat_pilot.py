"""Helpers for driving ``ChatApp`` with Textual's pilot."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable

from textual.pilot import Pilot
from textual.widgets import Input

from koboi_tui.app import ChatApp, MessageView


async def wait_for(
    pilot: Pilot[None], condition: Callable[[], object], what: str, timeout: float = 15.0
) -> None:
    """Let the app run until ``condition()`` is true; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


async def ready(pilot: Pilot[None]) -> ChatApp:
    app = pilot.app
    assert isinstance(app, ChatApp)
    await wait_for(pilot, lambda: app.state == "ready", "the agent to open")
    return app


async def say(pilot: Pilot[None], text: str, *, typed: bool = False) -> None:
    """Put ``text`` in the prompt (key by key when ``typed``) and send it with Enter."""
    app = pilot.app
    assert isinstance(app, ChatApp)
    prompt = app.query_one("#prompt", Input)
    prompt.focus()
    if typed:
        await pilot.press(*text)
    else:
        prompt.value = text
    await pilot.press("enter")


def texts(app: ChatApp) -> list[str]:
    """What the conversation shows, message by message."""
    return [w.text for w in app.query(MessageView)]


def idle(app: ChatApp) -> bool:
    return app.state == "ready" and not app.controller.running


_CELL = re.compile(
    r'<text class="[^"]*" x="(?P<x>[\d.]+)" y="[\d.]+" textLength="[\d.]+" '
    r'clip-path="url\(#terminal-\d+-line-(?P<line>\d+)\)">(?P<text>[^<]*)</text>'
)
#: Rich draws one terminal cell this many pixels wide in an SVG screenshot.
_CELL_WIDTH = 12.2
#: Ids that differ from run to run (sessions, approvals, traces): hidden in snapshots.
_RANDOM = re.compile(r"[0-9a-f]{8,}")


def screen_text(app: ChatApp) -> str:
    """The screen as plain text, one line per terminal row, read from the app's SVG
    screenshot (Textual's public ``export_screenshot``); random ids are blanked."""
    width, height = app.size
    rows = [[" "] * width for _ in range(height)]
    for cell in _CELL.finditer(app.export_screenshot()):
        row = int(cell["line"])
        column = round(float(cell["x"]) / _CELL_WIDTH)
        for offset, char in enumerate(html.unescape(cell["text"]).replace("\xa0", " ")):
            if 0 <= row < height and 0 <= column + offset < width:
                rows[row][column + offset] = char
    lines = ["".join(r).rstrip() for r in rows]
    return "\n".join(_RANDOM.sub(lambda m: "#" * len(m[0]), line) for line in lines) + "\n"
