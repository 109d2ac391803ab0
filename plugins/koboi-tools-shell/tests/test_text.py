"""Decoding output: invalid UTF-8 replaced, a cut character dropped, controls stripped.

What is stripped is koboi-confine's rule (``koboi_confine.text.neutralise``),
tested there; here only that decoding applies it.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from koboi_tools_shell.text import decode_output

FORBIDDEN = {chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]} - {"\n", "\t"}


def test_decode_replaces_invalid_utf8() -> None:
    assert decode_output(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"


def test_decode_strips_escapes() -> None:
    assert decode_output(b"\x1b[31mred\x1b[0m\r\n") == "red\n"


def test_decode_of_a_tail_drops_a_character_cut_in_half() -> None:
    data = "é and more".encode()[1:]  # starts inside the two bytes of é
    assert decode_output(data, cut_at_start=True) == " and more"
    assert decode_output(data) == "\ufffd and more"  # control: without the flag it shows


@given(st.binary())
def test_decode_of_any_bytes_is_clean_text(data: bytes) -> None:
    cleaned = decode_output(data, cut_at_start=True)
    assert not FORBIDDEN & set(cleaned)
    cleaned.encode("utf-8")  # always valid
