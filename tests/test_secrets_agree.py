"""One definition of a secret (names and values, :mod:`koboi.secrets`), and the four places
that keep secrets out of sight agree on it: ``koboi show`` (the CLI), the governance
redaction (journal, audit trail, what a run shows), a bundle's config export (replay)
and the sandbox's environment scrub."""

from __future__ import annotations

import pytest

from koboi.secrets import find_secrets, is_secret_name
from koboi_cli.redact import redact_event_data
from koboi_confine.environment import clean_environment, is_forbidden
from koboi_governance.detect import secrets_from_env
from koboi_governance.redact import Redactor
from koboi_replay.config_text import remove_secrets

SECRET_NAMES = [
    "OPENAI_API_KEY",
    "github_token",
    "DB_PASSWORD",
    "Authorization",
    "apiKey",
    "client_secret",
    "SLACK_BOT_TOKEN",
    "my_passphrase",
    "AWS_SECRET_ACCESS_KEY",
    "session_cookie",
]
NOT_SECRET_NAMES = ["max_tokens", "KEYBOARD_LAYOUT", "api_key_env", "tokenizer", "monkey"]
SECRET_VALUES = [
    "sk-proj-" + "a1B2c3D4" * 4,
    "ghp_" + "a1B2" * 9,
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "Bearer abcd1234efgh5678",
    "postgresql://app:S3cr3t-pw@db.internal:5432/app",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----",
]
PLAIN = "just-an-ordinary-value"
LITERAL = "literal-9f3k-unguessable"


def _secret_part(value: str) -> str:
    (finding,) = find_secrets(value)
    return value[finding.start : finding.end]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_secret_name_is_one_for_all_four(name: str) -> None:
    assert is_secret_name(name)
    shown = redact_event_data("tool_call_started", {"arguments": {name: LITERAL}})
    assert LITERAL not in str(shown), "koboi show"
    assert LITERAL in secrets_from_env({name: LITERAL}), "governance (secrets from the env)"
    cleaned = remove_secrets({"llm": {name: LITERAL}})
    assert LITERAL not in str(cleaned.raw) and cleaned.redactions, "bundle export"
    assert is_forbidden(name), "sandbox environment"
    env = clean_environment(
        inherited={name: LITERAL}, pass_names=[name], fixed={}, requested=None, path=[], home="/h"
    )
    assert name not in env


@pytest.mark.parametrize("name", NOT_SECRET_NAMES)
def test_a_name_that_is_no_secret_is_left_alone_by_the_three_that_show_data(name: str) -> None:
    assert not is_secret_name(name)
    shown = redact_event_data("tool_call_started", {"arguments": {name: PLAIN}})
    assert PLAIN in str(shown)
    assert PLAIN not in secrets_from_env({name: PLAIN})
    assert remove_secrets({"llm": {name: PLAIN}}).raw == {"llm": {name: PLAIN}}
    # The sandbox may drop more than secrets (credential words anywhere, code injection,
    # provider families): that is caution, not another definition of a secret.


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_a_secret_value_is_one_for_all_four(value: str) -> None:
    secret = _secret_part(value)
    text = f"note: {value} end"
    shown = redact_event_data("tool_call_finished", {"content": text})
    assert secret not in str(shown), "koboi show"
    assert secret not in Redactor().redact(text), "governance redaction"
    cleaned = remove_secrets({"llm": {"note": text}})
    assert secret not in str(cleaned.raw), "bundle export"
    # A variable of koboi's environment under an innocent name, listed to pass through: its
    # value is a secret, so the sandbox keeps it out (the name alone would let it pass).
    assert not is_forbidden("INNOCENT")
    env = clean_environment(
        inherited={"INNOCENT": value},
        pass_names=["INNOCENT"],
        fixed={},
        requested=None,
        path=[],
        home="/h",
    )
    assert "INNOCENT" not in env, "sandbox environment"


def test_positive_control_ordinary_text_survives_all_four() -> None:
    text = "deploy the build to staging at 10:00"
    assert find_secrets(text) == []
    assert redact_event_data("tool_call_finished", {"content": text}) == {"content": text}
    assert Redactor().redact(text) == text
    assert remove_secrets({"llm": {"note": text}}).raw == {"llm": {"note": text}}
    # The same innocent variable passes through the sandbox when its value is no secret.
    env = clean_environment(
        inherited={"INNOCENT": text},
        pass_names=["INNOCENT"],
        fixed={},
        requested=None,
        path=[],
        home="/h",
    )
    assert env["INNOCENT"] == text
