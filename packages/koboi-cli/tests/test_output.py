"""The run printer, truncation and the colour decision."""

from __future__ import annotations

import io

import pytest

from koboi.events import TextDeltaEvent, ToolCallEvent, ToolResultEvent
from koboi.messages import ToolCall
from koboi_cli.cmd_run import EventPrinter, shorten
from koboi_cli.style import Style, table, wants_color


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert wants_color(FakeTerminal())
    assert not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(FakeTerminal())
    monkeypatch.setenv("NO_COLOR", "")  # empty means unset (no-color.org)
    assert wants_color(FakeTerminal())
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_color(FakeTerminal())


def events() -> list[object]:
    call = ToolCall(id="c1", name="calculator", arguments={"b": 1, "a": "x"})
    return [
        TextDeltaEvent("Let me ", 1),
        TextDeltaEvent("check.", 1),
        ToolCallEvent(call, 1),
        ToolResultEvent("c1", "calculator", "4", False, 1),
        ToolResultEvent("c2", "shell", "nope", True, 1, refused_by="approval"),
        ToolResultEvent("c3", "calculator", "division by zero", True, 1),
        TextDeltaEvent("It is ", 2),
        TextDeltaEvent("4.", 2),
    ]


def test_plain_printer_puts_tool_lines_on_lines_of_their_own() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, Style(out))
    for event in events():
        printer.handle(event)  # type: ignore[arg-type]
    printer.finish()
    assert out.getvalue() == (
        "Let me check.\n"
        '→ calculator {"a":"x","b":1}\n'
        "← 4\n"
        "← refused by approval: nope\n"
        "← error: division by zero\n"
        "It is 4.\n"
    )
    assert printer.refused_for_approval == 1


def test_styled_printer_uses_escape_codes_but_same_text() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, Style(out, color=True))
    for event in events():
        printer.handle(event)  # type: ignore[arg-type]
    printer.finish()
    styled = out.getvalue()
    assert "\x1b[" in styled
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", styled).splitlines()[1] == '→ calculator {"a":"x","b":1}'


def test_raw_arguments_are_shown_as_sent() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, Style(out))
    printer.handle(ToolCallEvent(ToolCall(id="c", name="t", raw_arguments="{oops"), 1))
    assert out.getvalue() == "→ t {oops\n"


def test_shorten() -> None:
    assert shorten("short") == "short"
    long_line = "x" * 1000
    assert shorten(long_line, chars=10) == "xxxxxxxxxx … (990 more characters)"
    many = "\n".join(f"line {i}" for i in range(20))
    cut = shorten(many, lines=2)
    assert cut.startswith("line 0\nline 1 … (")


def test_table_aligns_plain_text_even_when_coloured() -> None:
    style = Style(io.StringIO(), color=True)
    text = table(["A", "B"], [["xx", "loaded"], ["y", "failed"]], style, {1: style.status})
    plain = Style(io.StringIO(), color=False)
    assert table(["A", "B"], [["xx", "loaded"], ["y", "failed"]], plain) == (
        "A   B\nxx  loaded\ny   failed\n"
    )
    assert "\x1b[" in text


def test_a_runners_child_runs_and_its_answer_are_printed() -> None:
    from koboi.events import ChildEvent, FinalEvent, RunResult
    from koboi.messages import Usage

    def final(output: str, outcome: str = "completed") -> FinalEvent:
        return FinalEvent(RunResult("s", outcome, output, Usage(), 1))  # type: ignore[arg-type]

    call = ToolCall(id="c1", name="append_log", arguments={"line": "x"})
    out = io.StringIO()
    printer = EventPrinter(out, Style(out))
    for event in (
        ChildEvent(TextDeltaEvent("thinking", 1), "kid", None, "moon"),
        ChildEvent(ToolCallEvent(call, 1), "kid", None, "moon"),
        ChildEvent(
            ChildEvent(ToolResultEvent("c1", "append_log", "ok", False, 1), "g", "c9"), "kid"
        ),
        ChildEvent(final("the moon pulls"), "kid", None, "moon"),
        ChildEvent(final("", "failed"), "kid2", "call_7"),
        final("The answer."),  # a runner's: nothing was streamed, so it is printed
    ):
        printer.handle(event)  # type: ignore[arg-type]
    printer.finish()
    assert out.getvalue().splitlines() == [
        '[moon] → append_log {"line":"x"}',
        "[kid] [c9] ← ok",
        "[moon] done: the moon pulls",
        "[call_7] done: failed: -",
        "The answer.",
    ]
    streamed = io.StringIO()
    printer = EventPrinter(streamed, Style(streamed))
    printer.handle(TextDeltaEvent("The answer.", 1))
    printer.handle(final("The answer."))  # type: ignore[arg-type]
    printer.finish()
    assert streamed.getvalue() == "The answer.\n"  # shown once
