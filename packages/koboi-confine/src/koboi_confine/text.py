"""Command output made safe to show a model, a log or a terminal.

A command's output may hold terminal escape sequences (colours, but also ones
that move the cursor, retitle a window or rewrite what a reader already saw)
and raw control characters. The model gains nothing from them and a person
reading the journal in a terminal could be misled, so they go: only text,
newlines and tabs remain.
"""

from __future__ import annotations

import re

# Order matters: whole sequences first, so their parameters go with them.
_CONTROLS = re.compile(
    # CSI (ESC [ or 8-bit 0x9B): parameters, intermediates, one final byte.
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    # OSC (ESC ] or 0x9D) up to BEL or ST. An unterminated one ends at the line's end,
    # so one stray ESC ] cannot hide everything after it.
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    # DCS, SOS, PM, APC (7-bit or 8-bit) up to ST, likewise bounded by the line.
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"
    # Other escape sequences: ESC, intermediates, a final byte (ESC ( B, ESC 7, ESC c...).
    r"|\x1b[ -/]*[0-~]"
    # What is left: any C0 control but tab and newline (a lone CR lets output
    # overwrite what was shown), DEL, any C1 control, a lone ESC.
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def neutralise(text: str) -> str:
    """``text`` without escape sequences or control characters; ``\\n`` and ``\\t`` kept."""
    return _CONTROLS.sub("", text)
