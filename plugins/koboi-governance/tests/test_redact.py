"""Redaction: configured and detected secrets masked in text, in JSON-like data and in
streams, where a secret split across chunks is never emitted, not even in part."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi_governance.detect import TOKEN_RUN_CHARS, find
from koboi_governance.redact import (
    MARKER,
    MAX_HELD_CHARS,
    Redactor,
    StreamRedactor,
    literal_problem,
)

OPENAI_KEY = "sk-proj-Q7xv2Lm9Rt4Kp8Zw3Nc6Yb1Hd5Fg0Js"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDx3v9Jq2Lm7Rt4Kp8Zw3Nc6Yb1Hd5Fg0JsQ7xv2Lm9Rt4==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
LITERAL = "hunter2-Literal"

# Each text holds one secret; the value is the part that must never be shown.
SECRETS: list[tuple[str, str]] = [
    (OPENAI_KEY, OPENAI_KEY),
    (
        "sk-ant-api03-Qm7Vd2Lx9Rk4Tz8Wp1Hn6Jc3Yb5Gs0Ff",
        "sk-ant-api03-Qm7Vd2Lx9Rk4Tz8Wp1Hn6Jc3Yb5Gs0Ff",
    ),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6", "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"),
    ("glpat-Xy7zAbC9dEfGhIjKlMn0", "glpat-Xy7zAbC9dEfGhIjKlMn0"),
    ("xoxb-1234567890-AbCdEfGhIj", "xoxb-1234567890-AbCdEfGhIj"),
    ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    (JWT, JWT),
    ("Authorization: Bearer Zm9vYmFyYmF6MTIz", "Zm9vYmFyYmF6MTIz"),
    ("curl -H 'Basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA=="),
    (PEM, PEM),
    ("postgresql://app:S3cr3t-pw@db.internal/app", "S3cr3t-pw"),
    ('password="correct horse battery"', "correct horse battery"),
    ("secret_token: Xk9-Lm2-Qp7", "Xk9-Lm2-Qp7"),
    (f"the configured {LITERAL} here", LITERAL),
]
PII: list[tuple[str, str]] = [
    ("alice.smith@example.co.uk", "alice.smith@example.co.uk"),
    ("+1 (415) 555-0100", "+1 (415) 555-0100"),
    ("4111 1111 1111 1111", "4111 1111 1111 1111"),
    ("DE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 00"),
    ("123-45-6789", "123-45-6789"),
]
LITERALS = [LITERAL, "my pass phrase!", "4111111111", "S3cr3t-pw"]

REDACTORS = {
    "secrets": Redactor(),
    "secrets+pii": Redactor(pii=True),
    "literals+secrets": Redactor(literals=LITERALS),
    "literals+secrets+pii": Redactor(literals=LITERALS, pii=True),
    "literals only": Redactor(literals=LITERALS, kinds=()),
    "some kinds": Redactor(literals=[LITERAL], kinds=["jwt", "email", "secret_assignment"]),
}


def streamed(redactor: Redactor, chunks: list[str]) -> str:
    stream = redactor.stream()
    return "".join(stream.feed(chunk) for chunk in chunks) + stream.flush()


# --------------------------------------------------------------------------- redact


@pytest.mark.parametrize(("text", "value"), SECRETS + PII)
def test_each_secret_is_masked_and_nothing_else_changes(text: str, value: str) -> None:
    redactor = REDACTORS["literals+secrets+pii"]
    before, after = "Here: «", "» — done.\n"
    redacted = redactor.redact(before + text + after)
    assert value not in redacted
    assert redacted.startswith(before) and redacted.endswith(after)
    assert "[REDACTED" in redacted


def test_markers_name_the_kind_and_literals_get_a_plain_marker() -> None:
    redactor = Redactor(literals=[LITERAL])
    assert redactor.redact(f"key {OPENAI_KEY} and {LITERAL}.") == (
        "key [REDACTED:openai_api_key] and [REDACTED]."
    )
    assert (
        redactor.redact('{"password": "tiger"}') == '{"password": "[REDACTED:secret_assignment]"}'
    )
    assert redactor.redact("Authorization: Bearer Zm9vYmFyYmF6MTIz") == (
        "Authorization: Bearer [REDACTED:authorization]"
    )


def test_pii_is_masked_only_when_asked() -> None:
    text = "mail alice@example.com, card 4111 1111 1111 1111, key " + OPENAI_KEY
    assert Redactor().redact(text) == (
        "mail alice@example.com, card 4111 1111 1111 1111, key [REDACTED:openai_api_key]"
    )
    assert Redactor(pii=True).redact(text) == (
        "mail [REDACTED:email], card [REDACTED:payment_card], key [REDACTED:openai_api_key]"
    )
    assert Redactor(kinds=["email"]).redact(text) == text.replace(
        "alice@example.com", "[REDACTED:email]"
    )


def test_a_literal_inside_a_detected_secret_masks_the_whole_secret() -> None:
    inner = OPENAI_KEY[10:30]
    redacted = Redactor(literals=[inner]).redact(f"x {OPENAI_KEY} y")
    assert redacted == "x [REDACTED:openai_api_key] y"


def test_a_literal_overlapping_a_detected_secret_masks_both_entirely() -> None:
    # The literal covers the key's last characters and the text after it.
    literal = OPENAI_KEY[-8:] + " tail!"
    redacted = Redactor(literals=[literal]).redact(f"x {OPENAI_KEY} tail! y")
    assert redacted == "x [REDACTED:openai_api_key] y"
    for index in range(len(OPENAI_KEY) - 5):
        assert OPENAI_KEY[index : index + 6] not in redacted


def test_a_literal_equal_to_a_detected_secret_gets_the_plain_marker() -> None:
    assert Redactor(literals=[OPENAI_KEY]).redact(f"k={OPENAI_KEY}") == f"k={MARKER}"


def test_overlapping_literals_are_masked_together() -> None:
    redactor = Redactor(literals=["abcdef123", "123456xyz"])
    assert redactor.redact("[abcdef123456xyz]") == "[[REDACTED]]"
    assert redactor.redact("aaabcdef123") == "aa[REDACTED]"


def test_unicode_text_around_secrets_is_kept() -> None:
    redactor = Redactor(literals=["пароль-секрет"], pii=True)
    text = f"秘密 🔑 {OPENAI_KEY} — пароль-секрет — ✓ café"
    assert redactor.redact(text) == "秘密 🔑 [REDACTED:openai_api_key] — [REDACTED] — ✓ café"


def test_redacting_twice_changes_nothing() -> None:
    redactor = REDACTORS["literals+secrets+pii"]
    for text, _ in SECRETS + PII:
        once = redactor.redact(f"a {text} b")
        assert redactor.redact(once) == once
    glued = f"{LITERAL}AKIAIOSFODNN7EXAMPLE {OPENAI_KEY}[{LITERAL}]password=[REDACTED]"
    once = redactor.redact(glued)
    assert redactor.redact(once) == once


def test_an_inactive_redactor_changes_nothing() -> None:
    redactor = Redactor(kinds=())
    assert not redactor.active
    assert Redactor().active and Redactor(literals=[LITERAL], kinds=()).active
    text = f"{OPENAI_KEY} {LITERAL}"
    assert redactor.redact(text) == text
    stream = redactor.stream()
    assert stream.feed(text) == text and stream.flush() == ""


def test_the_redactor_never_shows_its_secrets() -> None:
    redactor = Redactor(literals=[LITERAL])
    assert LITERAL not in repr(redactor)
    assert LITERAL not in repr(redactor.stream())


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize("literal", ["abc12", "   Qz7   ", "\t\n12345\n"])
def test_short_literals_are_refused_with_the_reason(literal: str) -> None:
    with pytest.raises(ValueError, match="shorter than 6 characters") as caught:
        Redactor(literals=["long-enough-secret", literal])
    assert "configured secret #2" in str(caught.value)
    assert literal.strip() not in str(caught.value)
    # Positive control: six characters are enough.
    assert Redactor(literals=["abc123"]).redact("x abc123 y") == "x [REDACTED] y"


@pytest.mark.parametrize(
    "literal", ["]hunter22", "hunter22[", "xx[REDACT", "l]hunter22", "EDACTED:email"]
)
def test_literals_that_would_merge_with_a_marker_are_refused(literal: str) -> None:
    assert literal_problem(literal) is not None
    with pytest.raises(ValueError, match="redaction marker") as caught:
        Redactor(literals=[literal])
    assert literal not in str(caught.value)
    # Positive control: brackets inside a secret are fine.
    assert literal_problem("hun[ter]22") is None
    assert Redactor(literals=["hun[ter]22"]).redact("(hun[ter]22)") == "([REDACTED])"


def test_bad_arguments_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match="not a single string"):
        Redactor(literals="hunter2hunter2")
    with pytest.raises(TypeError, match="is a int"):
        Redactor(literals=[1234567])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not a single string"):
        Redactor(kinds="email")
    with pytest.raises(ValueError, match="did you mean 'email'"):
        Redactor(kinds=["emails"])
    with pytest.raises(ValueError, match="injection kinds are reported by guardrails"):
        Redactor(kinds=["instruction_override"])
    assert Redactor(kinds=["email", "jwt"]).kinds == {"email", "jwt"}
    assert "email" in Redactor(pii=True).kinds and "email" not in Redactor().kinds


# --------------------------------------------------------------------------- redact_data


def test_redact_data_copies_nested_data_and_redacts_every_string_and_key() -> None:
    data = {
        "messages": [
            {"role": "user", "content": f"my key is {OPENAI_KEY}"},
            ("tuple", LITERAL, 3.5, None, True),
        ],
        LITERAL: {"nested": [[f"deep {LITERAL}"]]},
        "count": 7,
        "raw": b"bytes stay",
    }
    redacted = Redactor(literals=[LITERAL]).redact_data(data)
    assert redacted == {
        "messages": [
            {"role": "user", "content": "my key is [REDACTED:openai_api_key]"},
            ("tuple", MARKER, 3.5, None, True),
        ],
        MARKER: {"nested": [["deep [REDACTED]"]]},
        "count": 7,
        "raw": b"bytes stay",
    }
    assert data["messages"][0] == {"role": "user", "content": f"my key is {OPENAI_KEY}"}  # type: ignore[index]
    assert LITERAL in data


def test_redact_data_keeps_every_entry_when_keys_redact_alike() -> None:
    other = OPENAI_KEY.replace("Q7", "Z9")
    data = {OPENAI_KEY: 1, other: 2, "[REDACTED:openai_api_key]#2": 3}
    redacted = Redactor().redact_data(data)
    assert sorted(redacted.values()) == [1, 2, 3]
    assert redacted["[REDACTED:openai_api_key]"] == 1
    assert Redactor().redact_data(redacted) == redacted


def test_redact_data_copies_even_when_inactive() -> None:
    data = {"a": [1, {"b": "c"}]}
    copied = Redactor(kinds=()).redact_data(data)
    assert copied == data and copied is not data and copied["a"] is not data["a"]


# --------------------------------------------------------------------------- streams


@pytest.mark.parametrize(("text", "value"), SECRETS + PII)
def test_a_secret_split_across_two_chunks_is_never_emitted(text: str, value: str) -> None:
    redactor = REDACTORS["literals+secrets+pii"]
    whole = f"Before it: {text} after it."
    value_at = whole.index(value)
    expected = redactor.redact(whole)
    assert value not in expected
    assert expected.startswith(whole[:value_at])  # nothing before the value is masked
    for cut in range(value_at + 1, value_at + len(value)):
        stream = redactor.stream()
        first = stream.feed(whole[:cut])
        # The first chunk ends inside the value: not one character of it is emitted.
        assert len(first) <= value_at
        assert first + stream.feed(whole[cut:]) + stream.flush() == expected


@pytest.mark.parametrize("pieces", [2, 3, 5, 17])
def test_a_secret_split_into_many_chunks_is_never_emitted(pieces: int) -> None:
    redactor = REDACTORS["literals+secrets+pii"]
    for text, value in SECRETS + PII:
        whole = f"«{text}»"
        size = -(-len(whole) // pieces)
        chunks = [whole[i : i + size] for i in range(0, len(whole), size)]
        stream = redactor.stream()
        emitted = [stream.feed(chunk) for chunk in chunks] + [stream.flush()]
        assert "".join(emitted) == redactor.redact(whole)
        assert all(value not in piece for piece in emitted)


def test_every_split_of_a_mixed_text_and_char_by_char_feeding_match_redact() -> None:
    whole = (
        f"user said: token={OPENAI_KEY[:20]}... no, {OPENAI_KEY}!\n"
        f"db postgresql://app:S3cr3t-pw@db/app, mail bob@example.com, {LITERAL}\n"
        f'{{"password": "correct horse", "note": "4111 1111 1111 1111 done"}}'
    )
    for name, redactor in REDACTORS.items():
        expected = redactor.redact(whole)
        assert streamed(redactor, list(whole)) == expected, name
        for cut in range(len(whole) + 1):
            assert streamed(redactor, [whole[:cut], whole[cut:]]) == expected, (name, cut)


_FILLER = [
    "the",
    "quick",
    " ",
    "  ",
    "\n",
    ":",
    "=",
    '"',
    "'",
    "[",
    "]",
    "(",
    ")",
    "-",
    "+",
    "42",
    "2024-01-15",
    "é",
    "日本",
    "password",
    "token",
    "Bearer",
    "Basic",
    "sk-",
    "eyJ",
    "@",
    "://",
    "-----BEGIN",
    "[REDACTED]",
    "AKIA",
    "DE89",
]
_ALL = [text for text, _ in SECRETS + PII] + LITERALS


@st.composite
def _fragment(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(_ALL))
    start = draw(st.integers(0, len(text)))
    return text[start : draw(st.integers(start, len(text)))]


_pieces = st.one_of(
    st.sampled_from(_ALL),
    _fragment(),
    st.sampled_from(_FILLER),
    st.text(alphabet="ab Z9_-.:/=@'\"[]()+\n\u00e9\u0130\U0001f511", max_size=8),
)
_texts = st.lists(_pieces, max_size=10).map("".join)


@st.composite
def _chunked(draw: st.DrawFn) -> list[str]:
    text = draw(_texts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@settings(max_examples=250, deadline=None)
@given(chunks=_chunked(), name=st.sampled_from(sorted(REDACTORS)))
def test_streaming_any_chunking_equals_redacting_the_whole(chunks: list[str], name: str) -> None:
    redactor = REDACTORS[name]
    assert streamed(redactor, chunks) == redactor.redact("".join(chunks))


@settings(max_examples=250, deadline=None)
@given(text=_texts, name=st.sampled_from(sorted(REDACTORS)))
def test_redaction_is_idempotent(text: str, name: str) -> None:
    redactor = REDACTORS[name]
    once = redactor.redact(text)
    assert redactor.redact(once) == once


@settings(max_examples=100, deadline=None)
@given(text=_texts)
def test_redacted_text_holds_no_detectable_secret_or_literal(text: str) -> None:
    redactor = REDACTORS["literals+secrets+pii"]
    redacted = redactor.redact(text)
    assert find(redacted, categories=["secret", "pii"]) == []
    assert all(literal not in redacted for literal in LITERALS)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_texts, children, max_size=4),
    max_leaves=12,
)


_KNOWN = ("session_id", "input_tokens", "content", "arguments", "step")


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(_texts | st.sampled_from(_KNOWN), _json_values, max_size=5),
    name=st.sampled_from(sorted(REDACTORS)),
    known=st.booleans(),
)
@pytest.mark.slow  # 300 examples: runs once, in this member's own session
@pytest.mark.timeout(300)  # ~10 s on a quiet machine; far more on a loaded one
def test_the_kernels_shortcut_masks_exactly_what_redact_data_masks(
    data: dict, name: str, known: bool
) -> None:
    # redact_json judges a whole event at once and passes it on untouched when nothing
    # in it needs masking: it must never pass on something redact_data would mask.
    redactor = REDACTORS[name]
    known_keys = _KNOWN if known else ()
    assert redactor.redact_json(data, known_keys=known_keys) == redactor.redact_data(data)


def test_redact_json_passes_clean_data_on_without_copying() -> None:
    redactor = Redactor(literals=[LITERAL])
    clean = {"step": 3, "name": "look", "usage": {"input_tokens": 1}, "session_id": "abc"}
    assert redactor.redact_json(clean) is clean
    dirty = {"step": 3, "content": f"the key is {LITERAL}"}
    masked = redactor.redact_json(dirty)
    assert masked == {"step": 3, "content": "the key is [REDACTED]"} and masked is not dirty


def test_plain_prose_fed_word_by_word_is_emitted_at_once() -> None:
    sentence = (
        "The agent read the file, ran the tests and wrote a short summary of what it "
        "found, then it waited for the next instruction from the operator."
    )
    words = sentence.split(" ")
    chunks = [words[0]] + [" " + word for word in words[1:]]
    for name, redactor in REDACTORS.items():
        stream = redactor.stream()
        emitted = "".join(stream.feed(chunk) for chunk in chunks)
        rest = stream.flush()
        assert emitted + rest == sentence, name
        # At most the last word waits for what follows it.
        assert len(rest) <= len(words[-1]), name
    literal_only = REDACTORS["literals only"].stream()
    assert literal_only.feed("nothing secret here") == "nothing secret here"


def test_the_start_of_a_literal_is_held_back_until_it_is_known() -> None:
    stream = Redactor(literals=[LITERAL], kinds=()).stream()
    assert stream.feed("say hunter2") == "say "
    assert stream.held_chars == len("hunter2")
    assert stream.feed("-Lit") == ""
    assert stream.feed("eral and hunter3") == "[REDACTED] and hunter3"
    assert stream.flush() == ""


def test_what_is_held_back_stays_bounded() -> None:
    redactor = Redactor(literals=[LITERAL], pii=True)
    # A long run without spaces (a base64 blob) and a private key that never ends.
    blob = "QUJD" * 15_000
    unterminated = "-----BEGIN PRIVATE KEY-----\n" + (
        "TUlJRXZnSUJBREFOQmdrcWhraUc5dzBCQVFF\n" * 900
    )
    for whole in (blob + " end", unterminated + "!end"):
        stream = redactor.stream()
        out = []
        for start in range(0, len(whole), 1000):
            out.append(stream.feed(whole[start : start + 1000]))
            assert stream.held_chars <= MAX_HELD_CHARS
        out.append(stream.flush())
        assert "".join(out) == redactor.redact(whole)
    stream = redactor.stream()
    stream.feed(blob)
    assert stream.held_chars <= TOKEN_RUN_CHARS
    # A key cut short is masked through its last line of material (up to 16 KiB:
    # real keys are under 8 KiB).
    cut_short = "-----BEGIN PRIVATE KEY-----\n" + ("TUlJRXZnSUJBREFOQmdrcWhraUc5dzBCQVFF\n" * 200)
    assert redactor.redact(cut_short + "!end") == "[REDACTED:private_key]!end"


def test_flush_ends_the_stream_and_the_next_one_starts_fresh() -> None:
    redactor = Redactor(literals=[LITERAL])
    stream = redactor.stream()
    assert isinstance(stream, StreamRedactor)
    assert stream.feed("a hunter2-Li") == "a "
    assert stream.flush() == "hunter2-Li"
    assert stream.held_chars == 0
    assert stream.feed("teral") == ""
    assert stream.flush() == "teral"
    assert stream.feed("") == "" and stream.flush() == ""


def test_feeding_something_else_than_text_is_refused() -> None:
    with pytest.raises(TypeError, match="takes text"):
        Redactor().stream().feed(b"bytes")  # type: ignore[arg-type]
