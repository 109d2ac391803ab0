"""Command output made safe to show a model, a log or a terminal.

A command's output may hold terminal escape sequences (colours, but also ones
that move the cursor, retitle a window or rewrite what a reader already saw)
and raw control characters. The model gains nothing from them and a person
reading the journal in a terminal could be misled, so they go, whatever the
sandbox did already: only text, newlines and tabs remain. The rules are the
ones the sandbox applies (:func:`koboi_confine.text.neutralise`), so both say the same.
"""

from __future__ import annotations

from koboi_confine.text import neutralise as strip_controls

__all__ = ["decode_output", "strip_controls"]


def decode_output(data: bytes, *, cut_at_start: bool = False) -> str:
    """Bytes a command wrote, as clean text: invalid UTF-8 replaced, controls stripped.

    ``cut_at_start``: ``data`` is the tail of a longer output, so it may begin
    inside a UTF-8 character; those continuation bytes are dropped rather than
    shown as replacement characters.
    """
    if cut_at_start:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    return strip_controls(data.decode("utf-8", errors="replace"))
