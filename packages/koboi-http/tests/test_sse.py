"""The SSE decoder: framing rules, and chunk boundaries anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from koboi_http.sse import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_data_event_type_and_id() -> None:
    events = decode(b'event: message_start\nid: 7\ndata: {"a": 1}\n\n')
    assert events == [SSEEvent('{"a": 1}', "message_start", "7")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode(b"data: one\ndata: two\ndata:three\n\n") == [SSEEvent("one\ntwo\nthree")]


def test_comments_and_unknown_fields_are_ignored() -> None:
    events = decode(b": keepalive\nfoo: bar\ndata: x\n\n: ping\n\n")
    assert events == [SSEEvent("x")]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\ndata: x\n\n") == [SSEEvent("x")]


def test_event_name_resets_after_each_event() -> None:
    events = decode(b"event: a\ndata: 1\n\ndata: 2\n\n")
    assert [(e.event, e.data) for e in events] == [("a", "1"), ("message", "2")]


def test_crlf_and_cr_line_ends() -> None:
    assert decode(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        SSEEvent("a"),
        SSEEvent("b"),
        SSEEvent("c"),
    ]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n") == [SSEEvent("a"), SSEEvent("b")]


def test_multibyte_utf8_split_across_chunks() -> None:
    body = "data: héllo wörld ☀️ 日本\n\n".encode()
    chunks = [body[i : i + 1] for i in range(len(body))]
    assert decode(*chunks) == [SSEEvent("héllo wörld ☀️ 日本")]


def test_only_one_leading_space_is_stripped() -> None:
    assert decode(b"data:  two spaces\n\n") == [SSEEvent(" two spaces")]


def test_line_separator_inside_data_is_not_a_line_end() -> None:
    # U+2028 is legal, unescaped, inside JSON strings; it must not split the line.
    assert decode('data: {"t": "a\u2028b"}\n\n'.encode()) == [SSEEvent('{"t": "a\u2028b"}')]


def test_unfinished_event_at_the_end_is_not_dispatched() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial") == []
    assert decoder.has_partial_event


def test_retry_field() -> None:
    assert decode(b"retry: 1500\ndata: x\n\n")[0].retry == 1500


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(_TEXT.filter(lambda t: t != ""), min_size=1, max_size=8),
    line_end=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_chunking_gives_the_same_events(
    payloads: list[str], line_end: str, cuts: list[int]
) -> None:
    body = "".join(f"data: {p}{line_end}{line_end}" for p in payloads).encode()
    points = sorted({c % (len(body) + 1) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert [e.data for e in decode(*chunks)] == payloads
