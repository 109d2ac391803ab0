"""Secrets never enter a bundle: ${VAR} kept as written, literal secrets replaced and reported."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from koboi_replay import bundle as B
from koboi_replay.config_text import is_secret_key, referenced_variables, remove_secrets

SECRET = "sk-live-0123456789abcdefghij"


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("auth_token", True),
        ("password", True),
        ("client_secret", True),
        ("Authorization", True),
        ("api_key_env", False),  # names a variable
        ("max_total_tokens", False),
        ("tokenizer", False),
        ("model", False),
    ],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_literal_secrets_are_replaced_references_kept() -> None:
    raw = {
        "llm": {
            "provider": "openai",
            "api_key": SECRET,
            "api_key_env": "OPENAI_API_KEY",
            "headers": {"Authorization": "Bearer ${TOKEN}", "X-Trace": f"Bearer {SECRET}"},
        },
        "providers": {"backup": {"provider": "anthropic", "api_key": "${ANTHROPIC_API_KEY}"}},
        "store": {"url": "postgresql://koboi:hunter2hunter2@db/koboi"},
        "agent": {"system_prompt": "Mind the api key: never print it."},
    }
    cleaned = remove_secrets(raw)
    assert cleaned.raw["llm"]["api_key"] == "${KOBOI_SECRET_LLM_API_KEY}"
    assert cleaned.raw["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert cleaned.raw["llm"]["headers"]["Authorization"] == "Bearer ${TOKEN}"
    assert cleaned.raw["llm"]["headers"]["X-Trace"] == "Bearer ${KOBOI_SECRET_LLM_HEADERS_X_TRACE}"
    assert cleaned.raw["providers"] == raw["providers"]
    assert cleaned.raw["store"]["url"] == "postgresql://koboi:${KOBOI_SECRET_STORE_URL}@db/koboi"
    assert cleaned.raw["agent"] == raw["agent"]
    assert [r.path for r in cleaned.redactions] == [
        "llm.api_key",
        "llm.headers.X-Trace",
        "store.url",
    ]
    assert "set KOBOI_SECRET_LLM_API_KEY" in cleaned.redactions[0].message()
    assert referenced_variables(cleaned.raw) == {
        "KOBOI_SECRET_LLM_API_KEY": False,
        "TOKEN": False,
        "KOBOI_SECRET_LLM_HEADERS_X_TRACE": False,
        "ANTHROPIC_API_KEY": False,
        "KOBOI_SECRET_STORE_URL": False,
    }


SECRET_CONFIG = f"""
    agent: {{name: secretive, mode: act, system_prompt: "Use key {SECRET} for the API."}}
    llm:
      provider: scripted
      script:
        - tool_calls: [{{name: calculator, arguments: {{expression: "2 + 2"}}}}]
        - reply: "4"
    tools: {{builtin: [calculator]}}
    store: {{url: "memory://"}}
    sandbox: {{backend: passthrough, workdir: "${{WORKDIR:work}}"}}
"""


@pytest.mark.anyio
async def test_a_captured_config_holds_no_secret_and_still_replays(
    write_config: Callable[..., Path], record_session: Callable[..., Awaitable[Any]]
) -> None:
    """A credential recognisable by its shape is replaced wherever it is (here in the
    system prompt); the replay runs the config minus its secret as the session's config."""
    from koboi_replay.replayer import replay_bundle

    captured = await record_session(write_config(SECRET_CONFIG))
    bundle = captured.bundle
    assert SECRET.encode() not in b"".join(bundle.files.values())
    assert SECRET.encode() not in bundle.to_bytes()
    assert "${WORKDIR:work}" in bundle.config_text  # a reference stays as written
    assert "${KOBOI_SECRET_AGENT_SYSTEM_PROMPT}" in bundle.config_text
    assert bundle.manifest["config"]["redacted"] == ["agent.system_prompt"]
    assert any("agent.system_prompt held a literal secret" in n for n in captured.notes)
    report = await replay_bundle(B.parse_bundle(bundle.to_bytes()))
    assert report.identical, report.divergence
