from __future__ import annotations

import json

import pytest

from koboi_cli.redact import (
    MASK,
    is_sensitive_key,
    mask_secrets,
    redact_arguments,
    redact_event_data,
    redact_raw_arguments,
)


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "apiKey",
        "API-KEY",
        "token",
        "access_token",
        "client_secret",
        "password",
        "db_passwd",
        "Authorization",
        "Cookie",
        "set-cookie",
        "credentials",
        "x-api-key",
    ],
)
def test_secret_names_are_sensitive(name: str) -> None:
    assert is_sensitive_key(name)


@pytest.mark.parametrize("name", ["expression", "url", "command", "path", "query", "headers"])
def test_ordinary_names_are_not(name: str) -> None:
    assert not is_sensitive_key(name)


def test_arguments_are_redacted_by_key_at_any_depth() -> None:
    arguments = {
        "url": "https://example.com",
        "api_key": "plain-looking",
        "headers": {"Authorization": "whatever", "Accept": "text/html"},
        "items": [{"password": 1234}, {"name": "ok"}],
    }
    assert redact_arguments(arguments) == {
        "url": "https://example.com",
        "api_key": MASK,
        "headers": {"Authorization": MASK, "Accept": "text/html"},
        "items": [{"password": MASK}, {"name": "ok"}],
    }
    assert arguments["api_key"] == "plain-looking"  # the input is left alone


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("sk-proj-abcdefghijklmnop1234", "abcdefghijklmnop1234"),
        ("use sk-ant-api03-XYZxyz0123456789 please", "XYZxyz0123456789"),
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
        ("curl -H 'Authorization: Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ", "0123456789abcdefghij"),
        ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
        ("password=hunter2", "hunter2"),
        ('{"api_key": "abc123"}', "abc123"),
        ("postgresql://koboi:s3cret@db:5432/koboi", "s3cret"),
        ("aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY end", "wJalrXUtnFEMI"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ],
)
def test_values_that_look_like_secrets_are_masked(text: str, hidden: str) -> None:
    masked = mask_secrets(text)
    assert hidden not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "2 + 2",
        "the task-manager is at /usr/bin",
        "session 0123456789abcdef0123456789abcdef",  # hex ids and digests stay readable
        "sha256:" + "a" * 64,
        "It is 4.",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert mask_secrets(text) == text


def test_bearer_header_keeps_its_scheme() -> None:
    assert mask_secrets("Authorization: Bearer abcdef123456") == "Authorization: Bearer ***"


def test_string_arguments_are_masked_by_value_too() -> None:
    assert redact_arguments({"command": "curl -H 'Bearer abcdefgh1234' x"}) == {
        "command": "curl -H 'Bearer ***' x"
    }


def test_raw_arguments_are_redacted_as_json() -> None:
    raw = '{"api_key": "k", "q": "cats"}'
    assert json.loads(redact_raw_arguments(raw)) == {"api_key": MASK, "q": "cats"}
    assert "abcdef123456" not in redact_raw_arguments("not json: Bearer abcdef123456")


def test_event_data_redacts_arguments_but_not_usage_counts() -> None:
    response = {
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "name": "http",
                    "arguments": {"token": "t0ps3cret"},
                    "raw_arguments": '{"token": "t0ps3cret"}',
                }
            ],
        },
        "usage": {"input_tokens": 12, "output_tokens": 3},
    }
    shown = redact_event_data("model_call_finished", {"step": 1, "response": response})
    text = json.dumps(shown)
    assert "t0ps3cret" not in text
    assert shown["response"]["usage"] == {"input_tokens": 12, "output_tokens": 3}
    assert shown["response"]["message"]["tool_calls"][0]["arguments"] == {"token": MASK}

    started = redact_event_data(
        "tool_call_started", {"name": "http", "arguments": {"cookie": "c=1"}, "step": 1}
    )
    assert started["arguments"] == {"cookie": MASK}
    finished = redact_event_data(
        "tool_call_finished", {"content": "your key is sk-live-0123456789abcdef"}
    )
    assert "0123456789abcdef" not in finished["content"]
