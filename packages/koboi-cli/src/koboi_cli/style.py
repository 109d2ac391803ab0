"""Terminal styling: ANSI colours on a terminal, plain text everywhere else.

Colour is used only when the stream is a TTY, ``NO_COLOR`` is unset or empty
(https://no-color.org) and ``TERM`` is not ``dumb``. Plain text is what pipes,
files and tests see, so nothing downstream has to strip escape codes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import typer


def wants_color(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal that should get colours."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed or detached stream
        return False


class Style:
    """Styles text for one stream; a no-op when that stream gets no colour."""

    def __init__(self, stream: TextIO | None = None, *, color: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.color = wants_color(self.stream) if color is None else color

    def __call__(self, text: str, **styles: Any) -> str:
        if not self.color or not text:
            return text
        return typer.style(text, **styles)

    def bold(self, text: str) -> str:
        return self(text, bold=True)

    def dim(self, text: str) -> str:
        return self(text, dim=True)

    def red(self, text: str) -> str:
        return self(text, fg="red")

    def green(self, text: str) -> str:
        return self(text, fg="green")

    def yellow(self, text: str) -> str:
        return self(text, fg="yellow")

    def cyan(self, text: str) -> str:
        return self(text, fg="cyan")

    def status(self, status: str) -> str:
        """A plugin status, coloured by what it means."""
        colour = {"loaded": "green", "failed": "red", "incompatible": "red", "disabled": "yellow"}
        return self(status, fg=colour.get(status)) if status in colour else self.dim(status)


def write(stream: TextIO, text: str) -> None:
    """Write and flush (streamed output must appear as it is produced)."""
    stream.write(text)
    stream.flush()


def err(message: str, *, prefix: str = "error") -> None:
    """One ``prefix: message`` line on stderr, the prefix coloured on a terminal."""
    style = Style(sys.stderr)
    colour = {"error": "red", "warning": "yellow", "hint": "cyan"}.get(prefix, "green")
    label = style(f"{prefix}:", fg=colour, bold=True)
    write(sys.stderr, f"{label} {message}\n")


def warn(message: str) -> None:
    err(message, prefix="warning")


def table(
    header: list[str],
    rows: list[list[str]],
    style: Style,
    colorize: dict[int, Callable[[str], str]] | None = None,
) -> str:
    """Left-aligned columns separated by two spaces, the header bold on a terminal.

    ``colorize`` maps a column index to a styling function; cells are padded on
    their plain text, so colours never break the alignment.
    """
    colorize = colorize or {}
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str], paint: Callable[[int, str], str]) -> str:
        parts = [
            paint(i, c) + " " * (w - len(c))
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    lines = [line(header, lambda _i, c: style.bold(c))]
    lines += [line(row, lambda i, c: colorize.get(i, str)(c)) for row in rows]
    return "\n".join(lines) + "\n"
