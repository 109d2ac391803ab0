"""neutralise: escape sequences and control characters go, text, tabs and newlines stay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi_confine.text import neutralise

FORBIDDEN = {chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]} - {"\n", "\t"}


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[1;38;5;196mbold\x1b[m", "bold"),
        ("\x1b[2J\x1b[Hcleared", "cleared"),  # clear screen, cursor home
        ("\x1b[?1049h alt screen", " alt screen"),
        ("\x1b]0;window title\x07text", "text"),  # OSC ended by BEL
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ST ends
        ("\x1bPq#0;2;0;0;0\x1b\\after", "after"),  # DCS (sixel)
        ("\x1b(Bcharset \x1b7saved\x1b8 \x1bcreset", "charset saved reset"),
        ("\x9b31m8-bit CSI\x9bm", "8-bit CSI"),
        ("\x9d0;title\x9cafter", "after"),
        ("back\x08\x08space", "backspace"),
        ("over\rwrite", "overwrite"),
        ("crlf\r\n", "crlf\n"),
        ("bell\x07 nul\x00 del\x7f c1\x85", "bell nul del c1"),
        ("lone escape \x1b", "lone escape "),
        ("tabs\tand\nnewlines\n", "tabs\tand\nnewlines\n"),
        ("unicode: é ü 中文 🙂", "unicode: é ü 中文 🙂"),
    ],
)
def test_strips_escapes_and_controls(raw: str, clean: str) -> None:
    assert neutralise(raw) == clean


def test_an_unterminated_osc_hides_at_most_its_own_line() -> None:
    assert neutralise("a\x1b]0;no end\nsecond line\n") == "a\nsecond line\n"


@given(st.text())
def test_no_control_survives_any_text(text: str) -> None:
    cleaned = neutralise(text)
    assert not FORBIDDEN & set(cleaned)
    assert neutralise(cleaned) == cleaned


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc",))))
def test_text_without_controls_is_unchanged(text: str) -> None:
    assert neutralise(text) == text
