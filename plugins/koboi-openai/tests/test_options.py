"""The options model: which key goes where, and validation through the kernel."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from koboi import ConfigError, validate_config
from koboi.plugins import PluginHost
from koboi_openai.config import DEFAULT_BASE_URL, OpenAIOptions, is_openai_url

USER_KEY = "sk-proj-REALUSERKEY0123456789abcdef"
OTHER_KEY = "sk-or-v1-0123456789abcdef0123456789"


def _errors(settings: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        OpenAIOptions.model_validate(settings)
    return str(caught.value)


# -- OpenAI's own API --------------------------------------------------------------


def test_the_key_comes_from_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    options = OpenAIOptions(model="gpt-4o-mini")
    assert options.base_url == DEFAULT_BASE_URL
    assert options.api_key is not None
    assert options.api_key.get_secret_value() == USER_KEY
    assert options.key_hint == "OPENAI_API_KEY"
    assert USER_KEY not in repr(options)
    assert USER_KEY not in str(options.model_dump())


def test_a_missing_key_names_openai_api_key() -> None:
    message = _errors({"model": "gpt-4o-mini"})
    assert "OPENAI_API_KEY" in message


@pytest.mark.parametrize("placeholder", ["sk-...", "<your key>", "sk-xxxx", "YOUR_API_KEY_HERE"])
def test_a_placeholder_key_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, placeholder: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", placeholder)
    message = _errors({"model": "gpt-4o-mini"})
    assert "OPENAI_API_KEY" in message
    assert "placeholder" in message


@pytest.mark.parametrize("placeholder", ["sk-...", "<your key>"])
def test_a_placeholder_key_in_the_config_is_refused(placeholder: str) -> None:
    message = _errors({"model": "gpt-4o-mini", "api_key": placeholder})
    assert "OPENAI_API_KEY" in message
    assert placeholder not in message


def test_a_configured_key_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    options = OpenAIOptions(model="gpt-4o-mini", api_key=OTHER_KEY)  # type: ignore[arg-type]
    assert options.api_key is not None and options.api_key.get_secret_value() == OTHER_KEY
    assert options.key_hint == "api_key"


def test_a_named_variable_replaces_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    monkeypatch.setenv("KOBOI_TEST_KEY", OTHER_KEY)
    options = OpenAIOptions(model="gpt-4o-mini", api_key_env_var="KOBOI_TEST_KEY")
    assert options.api_key is not None and options.api_key.get_secret_value() == OTHER_KEY
    assert options.key_hint == "KOBOI_TEST_KEY"


# -- any other server -----------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [
        "http://localhost:11434/v1",
        "http://127.0.0.1:8000/v1",
        "https://openrouter.ai/api/v1",
        "http://api.openai.com/v1",  # no TLS: not OpenAI's API
        "https://api.openai.com:8443/v1",
        "https://api.openai.com.example.net/v1",
        "https://api-openai.com/v1",
    ],
)
def test_openai_api_key_is_never_used_for_another_server(
    monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    options = OpenAIOptions(model="llama3.1", base_url=base_url)
    assert options.api_key is None
    assert not options.is_openai
    assert "OPENAI_API_KEY is never sent" in options.key_hint


def test_no_key_at_all_is_fine_for_another_server() -> None:
    options = OpenAIOptions(model="llama3.1", base_url="http://localhost:11434/v1")
    assert options.api_key is None


def test_another_server_takes_a_configured_key() -> None:
    options = OpenAIOptions.model_validate(
        {"model": "m", "base_url": "https://openrouter.ai/api/v1", "api_key": OTHER_KEY}
    )
    assert options.api_key is not None and options.api_key.get_secret_value() == OTHER_KEY
    assert options.key_hint == "api_key"


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_key_means_no_key_for_another_server(blank: str) -> None:
    options = OpenAIOptions.model_validate(
        {"model": "m", "base_url": "http://localhost:8000/v1", "api_key": blank}
    )
    assert options.api_key is None


@pytest.mark.parametrize("key", ["EMPTY", "ollama", "lm-studio", "sk-no-key-required"])
def test_the_dummy_keys_local_servers_document_are_accepted(key: str) -> None:
    options = OpenAIOptions.model_validate(
        {"model": "m", "base_url": "http://localhost:8000/v1", "api_key": key}
    )
    assert options.api_key is not None and options.api_key.get_secret_value() == key


def test_a_placeholder_for_another_server_is_refused() -> None:
    message = _errors({"model": "m", "base_url": "http://localhost:8000/v1", "api_key": "sk-..."})
    assert "leave api_key out" in message


def test_a_named_variable_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    message = _errors(
        {
            "model": "m",
            "base_url": "https://openrouter.ai/api/v1",
            "api_key_env_var": "OPENROUTER_API_KEY",
        }
    )
    assert "OPENROUTER_API_KEY" in message and "not set" in message
    assert USER_KEY not in message


def test_a_named_variable_holding_a_placeholder_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_TEST_KEY", "<your key>")
    message = _errors(
        {"model": "m", "base_url": "http://localhost:8000/v1", "api_key_env_var": "KOBOI_TEST_KEY"}
    )
    assert "KOBOI_TEST_KEY" in message and "placeholder" in message


def test_api_key_and_api_key_env_var_together_are_refused() -> None:
    message = _errors(
        {
            "model": "m",
            "base_url": "http://localhost:8000/v1",
            "api_key": OTHER_KEY,
            "api_key_env_var": "KOBOI_TEST_KEY",
        }
    )
    assert "not both" in message
    assert OTHER_KEY not in message


# -- URLs and other fields -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.openai.com/v1", True),
        ("https://api.openai.com/v1/", True),
        ("HTTPS://API.OPENAI.COM/v1", True),
        ("https://api.openai.com:443/v1", True),
        ("http://api.openai.com/v1", False),
        ("https://api.openai.com.evil.test/v1", False),
        ("https://evil.test/api.openai.com/v1", False),
        ("https://evil.test/?h=api.openai.com", False),
        ("https://api.openai.com@evil.test/v1", False),
        ("https://user@api.openai.com/v1", False),
    ],
)
def test_is_openai_url(url: str, expected: bool) -> None:
    assert is_openai_url(url) is expected


@pytest.mark.parametrize(
    "url",
    [
        "localhost:11434/v1",
        "ftp://example.test/v1",
        "https://evil.test\\@api.openai.com/v1",
        "https://api.openai.com@evil.test/v1",
        "https://user:pass@example.test/v1",
        "https://example.test/v 1",
        "https://example.test:99999/v1",
    ],
)
def test_bad_base_urls_are_refused(url: str) -> None:
    message = _errors({"model": "m", "base_url": url})
    assert "base_url" in message


@pytest.mark.parametrize("key", ["messages", "stream", "stream_options", "tools", "model"])
def test_options_may_not_set_what_the_provider_sets(key: str) -> None:
    message = _errors(
        {"model": "m", "base_url": "http://localhost:8000/v1", "options": {key: True}}
    )
    assert key in message


def test_api_key_env_var_must_be_a_variable_name() -> None:
    message = _errors(
        {"model": "m", "base_url": "http://localhost:8000/v1", "api_key_env_var": "$MY KEY"}
    )
    assert "not an environment variable name" in message


def test_every_option_is_described() -> None:
    for name, field in OpenAIOptions.model_fields.items():
        assert field.description, f"llm.{name} has no description"


# -- through the kernel -----------------------------------------------------------------------

BASE: dict[str, Any] = {
    "agent": {"name": "t", "system_prompt": "Be brief."},
    "tools": {"builtin": ["calculator"]},
    "store": {"url": "memory://"},
}


def test_a_config_validates_with_the_key_from_the_environment(
    host: PluginHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    config = validate_config(
        {**BASE, "llm": {"provider": "openai", "model": "gpt-4o-mini", "options": {"seed": 1}}},
        host.catalog(),
    )
    assert isinstance(config.llm_options, OpenAIOptions)
    assert config.llm_options.options == {"seed": 1}
    assert config.llm_options.api_key is not None


def test_a_config_with_an_interpolated_key(host: PluginHost) -> None:
    config = validate_config(
        {**BASE, "llm": {"provider": "openai", "model": "gpt-4o-mini", "api_key": "${MY_KEY}"}},
        host.catalog(),
        env={"MY_KEY": OTHER_KEY},
    )
    assert config.llm_options.api_key.get_secret_value() == OTHER_KEY


def test_a_config_without_a_key_names_the_variable(host: PluginHost) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config(
            {**BASE, "llm": {"provider": "openai", "model": "gpt-4o-mini"}}, host.catalog()
        )
    (problem,) = caught.value.problems
    assert problem.path.startswith("llm")
    assert "OPENAI_API_KEY" in str(caught.value)


@pytest.mark.parametrize("where", ["env", "config"])
def test_a_config_with_a_placeholder_key_fails_without_showing_it(
    host: PluginHost, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    placeholder = "sk-xxxxxxxxxxxxxxxx"
    llm: dict[str, Any] = {"provider": "openai", "model": "gpt-4o-mini"}
    if where == "env":
        monkeypatch.setenv("OPENAI_API_KEY", placeholder)
    else:
        llm["api_key"] = placeholder
    with pytest.raises(ConfigError) as caught:
        validate_config({**BASE, "llm": llm}, host.catalog())
    assert "OPENAI_API_KEY" in str(caught.value)
    assert placeholder not in str(caught.value)


def test_a_config_typo_gets_a_suggestion(host: PluginHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    with pytest.raises(ConfigError) as caught:
        validate_config(
            {**BASE, "llm": {"provider": "openai", "model": "gpt-4o-mini", "base_ur": "x"}},
            host.catalog(),
        )
    by_path = {p.path: p for p in caught.value.problems}
    assert "did you mean 'base_url'" in by_path["llm.base_ur"].hint
    assert USER_KEY not in str(caught.value)


def test_the_readme_examples_are_valid_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", OTHER_KEY)
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert len(blocks) == 3
    for block in blocks:
        llm = dict(yaml.safe_load(block)["llm"])
        assert llm.pop("provider") == "openai"
        OpenAIOptions.model_validate(llm)


def test_replay_mode_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under cache.mode replay the API is never called: a machine without a key can replay."""
    from koboi.config import validate_config

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = validate_config(
        {"llm": {"provider": "openai", "model": "gpt-4o-mini"}, "cache": {"mode": "replay"}}
    )
    assert config.llm_options.api_key is None
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        validate_config({"llm": {"provider": "openai", "model": "gpt-4o-mini"}})


# -- context windows ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1-nano", 1_047_576),
        ("gpt-4", 8_192),
        ("gpt-4-turbo-2024-04-09", 128_000),
        ("o3-mini", 200_000),
        ("llama3.1:8b", None),  # a local OpenAI-compatible server's model: unknown
    ],
)
def test_the_provider_states_the_window_of_models_it_knows(
    model: str, window: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from koboi_openai.provider import OpenAIProvider

    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    assert OpenAIProvider(OpenAIOptions(model=model)).context_window() == window
