"""The ``llm:`` section validates through the kernel, and the credential rules hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi.config import AgentConfig, load_config, validate_config
from koboi.errors import ConfigError
from koboi.plugins import PluginHost
from koboi_anthropic.options import AnthropicOptions

EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "anthropic.yaml"


@pytest.fixture
def host() -> PluginHost:
    """The installed plugins (this one and koboi-tools-basic), strictly loaded."""
    plugins = PluginHost(strict=True)
    plugins.load()
    return plugins


@pytest.fixture
def validate(host: PluginHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)  # no stray .env

    def run(llm: dict[str, Any]) -> AgentConfig:
        data = {
            "agent": {"name": "t"},
            "llm": {"provider": "anthropic", **llm},
            "tools": {"builtin": ["calculator"]},
        }
        return validate_config(data, host.catalog())

    return run


def problems(error: ConfigError) -> str:
    return "\n".join(p.render() for p in error.problems)


def test_key_from_the_environment(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    config = validate({"model": "claude-sonnet-4-5"})
    options = config.llm_options
    assert isinstance(options, AnthropicOptions)
    assert options.api_key is not None and options.api_key.get_secret_value() == api_key
    assert options.auth_token is None
    assert options.base_url == "https://api.anthropic.com"
    assert options.max_tokens == 4096
    assert api_key not in repr(options) and api_key not in str(config.llm_options)


def test_token_from_the_environment(
    validate: Any, monkeypatch: pytest.MonkeyPatch, auth_token: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", auth_token)
    options = validate({"model": "claude-sonnet-4-5"}).llm_options
    assert options.auth_token.get_secret_value() == auth_token
    assert options.api_key is None
    assert options.key_hint == "ANTHROPIC_AUTH_TOKEN"
    assert auth_token not in repr(options)


def test_no_credential_names_both_variables(validate: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"model": "claude-sonnet-4-5"})
    text = problems(caught.value)
    assert "ANTHROPIC_API_KEY" in text and "ANTHROPIC_AUTH_TOKEN" in text
    assert caught.value.problems[0].path == "llm"


def test_both_in_the_environment_is_refused(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str, auth_token: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", auth_token)
    with pytest.raises(ConfigError) as caught:
        validate({"model": "claude-sonnet-4-5"})
    text = str(caught.value)
    assert "only one may be used" in text
    assert api_key not in text and auth_token not in text


def test_the_config_chooses_when_both_are_set(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str, auth_token: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", auth_token)
    options = validate({"model": "m", "auth_token": "${ANTHROPIC_AUTH_TOKEN}"}).llm_options
    assert (options.api_key, options.auth_token.get_secret_value()) == (None, auth_token)
    options = validate({"model": "m", "api_key": "${ANTHROPIC_API_KEY}"}).llm_options
    assert (options.api_key.get_secret_value(), options.auth_token) == (api_key, None)


def test_both_configured_is_refused(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str, auth_token: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", auth_token)
    with pytest.raises(ConfigError) as caught:
        validate(
            {
                "model": "m",
                "api_key": "${ANTHROPIC_API_KEY}",
                "auth_token": "${ANTHROPIC_AUTH_TOKEN}",
            }
        )
    text = str(caught.value)
    assert "both api_key and auth_token are set" in text
    assert api_key not in text and auth_token not in text


@pytest.mark.parametrize("placeholder", ["sk-ant-...", "<your key>", "sk-ant-xxxx", "changeme"])
@pytest.mark.parametrize("variable", ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
def test_placeholders_in_the_environment(
    validate: Any, monkeypatch: pytest.MonkeyPatch, placeholder: str, variable: str
) -> None:
    monkeypatch.setenv(variable, placeholder)
    with pytest.raises(ConfigError) as caught:
        validate({"model": "claude-sonnet-4-5"})
    text = str(caught.value)
    assert f"{variable} holds a placeholder" in text
    assert placeholder not in text.replace(variable, "")


@pytest.mark.parametrize("field", ["api_key", "auth_token"])
def test_placeholders_in_the_config(validate: Any, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"model": "claude-sonnet-4-5", field: "<paste it here>"})
    text = str(caught.value)
    assert "placeholder" in text
    assert "ANTHROPIC_API_KEY" in text if field == "api_key" else "ANTHROPIC_AUTH_TOKEN" in text
    assert "paste it here" not in text


def test_other_problems_never_show_the_key(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    with pytest.raises(ConfigError) as caught:
        validate({"model": "m", "api_key": "${ANTHROPIC_API_KEY}", "max_tokens": 0, "max_token": 5})
    text = str(caught.value)
    assert "llm.max_tokens" in text
    assert "llm.max_token: unknown key (did you mean 'max_tokens'?)" in text
    assert api_key not in text


def test_model_is_required(validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    with pytest.raises(ConfigError) as caught:
        validate({})
    assert "llm.model: is required" in str(caught.value)


# -- the example config ----------------------------------------------------------------


def test_example_config_validates_with_a_key_in_the_environment(
    host: PluginHost, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, api_key: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    config = load_config(EXAMPLE, host.catalog())
    assert config.llm.provider == "anthropic"
    options = config.llm_options
    assert isinstance(options, AnthropicOptions)
    assert options.model.startswith("claude-")
    assert options.api_key is not None and options.api_key.get_secret_value() == api_key
    assert config.tools.builtin == ["calculator"]
    # The key comes from the environment, never from the file.
    assert api_key not in EXAMPLE.read_text()


def test_example_config_without_a_key_says_which_variable(
    host: PluginHost, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLE, host.catalog())
    assert "ANTHROPIC_API_KEY" in str(caught.value)


def test_replay_mode_needs_no_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under cache.mode replay the API is never called: a machine without a key can replay."""
    from koboi.config import validate_config

    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    llm = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    config = validate_config({"llm": llm, "cache": {"mode": "replay"}})
    assert config.llm_options.api_key is None
    assert config.llm_options.auth_token is None
    with pytest.raises(Exception, match="ANTHROPIC_API_KEY"):
        validate_config({"llm": llm})


def test_claude_states_its_window_and_the_config_overrides_it(
    validate: Any, monkeypatch: pytest.MonkeyPatch, api_key: str, host: PluginHost
) -> None:
    from koboi.models import build_model

    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    stated = build_model(validate({"model": "claude-sonnet-4-5"}), host.catalog(), None)
    assert stated.context_window() == 200_000
    overridden = validate({"model": "claude-sonnet-4-5", "context_window": 1_000_000})
    assert build_model(overridden, host.catalog(), None).context_window() == 1_000_000
