"""Options validation: token and account id from the config or the environment, never echoed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import koboi_tools_basic.plugin
from koboi.config import load_config, validate_config
from koboi.errors import ConfigError
from koboi.plugins import PluginHost
from koboi_cloudflare import plugin
from koboi_cloudflare.config import DEFAULT_BASE_URL, CloudflareOptions

ACCOUNT = "0123456789abcdef0123456789abcdef"
TOKEN = "Zq3VtR8nXw2LpK7mYc4BhD9sFj6GaE1uTo5NiQ0r"
MODEL = "@cf/meta/llama-3.3-70b-instruct-fp8-fast"
EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "cloudflare.yaml"


def problems(settings: dict[str, Any]) -> dict[str, str]:
    """``{field: message}`` of the validation errors of ``settings``."""
    with pytest.raises(ValidationError) as caught:
        CloudflareOptions.model_validate(settings)
    return {".".join(map(str, e["loc"])): e["msg"] for e in caught.value.errors()}


def test_token_and_account_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", ACCOUNT.upper())
    options = CloudflareOptions(model=MODEL)
    assert options.api_key is not None and options.api_key.get_secret_value() == TOKEN
    assert options.account_id == ACCOUNT  # lower-cased
    assert options.base_url == DEFAULT_BASE_URL == "https://api.cloudflare.com/client/v4"
    assert TOKEN not in repr(options) and TOKEN not in str(options.model_dump())


def test_config_values_win_over_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLOUDFLARE_API_TOKEN", "Aa" * 20)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", "f" * 32)
    options = CloudflareOptions(model=MODEL, api_key=TOKEN, account_id=ACCOUNT)
    assert options.api_key is not None and options.api_key.get_secret_value() == TOKEN
    assert options.account_id == ACCOUNT


def test_missing_token_and_account_are_reported_together(clean_env: pytest.MonkeyPatch) -> None:
    found = problems({"model": MODEL})
    assert "CLOUDFLARE_API_TOKEN" in found["api_key"]
    assert "CLOUDFLARE_ACCOUNT_ID" in found["account_id"]


@pytest.mark.parametrize(
    "placeholder", ["sk-...", "<your key>", "your-token-here", "xxxxxxxx", "${TOKEN}"]
)
def test_placeholder_tokens_are_refused(clean_env: pytest.MonkeyPatch, placeholder: str) -> None:
    clean_env.setenv("CLOUDFLARE_API_TOKEN", placeholder)
    found = problems({"model": MODEL, "account_id": ACCOUNT})
    assert "CLOUDFLARE_API_TOKEN" in found["api_key"]
    assert "placeholder" in found["api_key"]
    found = problems({"model": MODEL, "account_id": ACCOUNT, "api_key": placeholder})
    assert "placeholder" in found["api_key"]


@pytest.mark.parametrize(
    "account",
    [
        "<your account id>",
        "0" * 32,
        "0123456789abcdef",  # too short
        "0123456789abcdef0123456789abcdeg",  # not hex
        TOKEN,  # the token pasted into the wrong place
    ],
)
def test_account_ids_that_cannot_work(clean_env: pytest.MonkeyPatch, account: str) -> None:
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", account)
    message = problems({"model": MODEL, "api_key": TOKEN})["account_id"]
    assert "CLOUDFLARE_ACCOUNT_ID" in message and "32 hexadecimal" in message
    assert account not in message  # never echoed: it might be a secret in the wrong place
    message = problems({"model": MODEL, "api_key": TOKEN, "account_id": account})["account_id"]
    assert message.startswith("Value error, account_id must be")


@pytest.mark.parametrize(
    "model", ["", "@cf/meta/../secrets", "@cf/meta/llama 3", "@cf/x?y=1", "@cf//x", "/@cf/x"]
)
def test_model_names_that_are_not_paths(clean_env: pytest.MonkeyPatch, model: str) -> None:
    assert "model" in problems({"model": model, "api_key": TOKEN, "account_id": ACCOUNT})


def test_options_may_not_set_what_the_provider_writes(clean_env: pytest.MonkeyPatch) -> None:
    found = problems(
        {
            "model": MODEL,
            "api_key": TOKEN,
            "account_id": ACCOUNT,
            "options": {"stream": True, "messages": [], "temperature": 0.1},
        }
    )
    assert "messages, stream" in found["options"]


def test_unknown_keys_are_refused(clean_env: pytest.MonkeyPatch) -> None:
    found = problems({"model": MODEL, "api_key": TOKEN, "account_id": ACCOUNT, "acount_id": "x"})
    assert "acount_id" in found


@pytest.fixture
def host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(plugin, "cloudflare", dist="koboi-cloudflare")
    return host


def test_the_kernel_validates_a_config_using_the_provider(
    host: PluginHost, clean_env: pytest.MonkeyPatch
) -> None:
    raw = {
        "llm": {
            "provider": "cloudflare",
            "model": MODEL,
            "api_key": "${CLOUDFLARE_API_TOKEN}",
            "account_id": "${CLOUDFLARE_ACCOUNT_ID}",
            "options": {"max_tokens": 300},
        }
    }
    env = {"CLOUDFLARE_API_TOKEN": TOKEN, "CLOUDFLARE_ACCOUNT_ID": ACCOUNT}
    config = validate_config(raw, host.catalog(), env=env)
    options = config.llm_options
    assert isinstance(options, CloudflareOptions)
    assert (options.model, options.account_id, options.options) == (
        MODEL,
        ACCOUNT,
        {"max_tokens": 300},
    )


def test_the_kernel_reports_missing_and_placeholder_values_by_key_path(
    host: PluginHost, clean_env: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config({"llm": {"provider": "cloudflare", "model": MODEL}}, host.catalog())
    by_path = {p.path: p.message for p in caught.value.problems}
    assert "CLOUDFLARE_API_TOKEN" in by_path["llm.api_key"]
    assert "CLOUDFLARE_ACCOUNT_ID" in by_path["llm.account_id"]

    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", ACCOUNT)
    raw = {"llm": {"provider": "cloudflare", "model": MODEL, "api_key": "sk-..."}}
    with pytest.raises(ConfigError) as caught:
        validate_config(raw, host.catalog())
    assert [p.path for p in caught.value.problems] == ["llm.api_key"]
    assert "CLOUDFLARE_API_TOKEN" in str(caught.value)


def test_the_token_never_appears_in_a_config_error(
    host: PluginHost, clean_env: pytest.MonkeyPatch
) -> None:
    raw = {"llm": {"provider": "cloudflare", "model": "bad model", "api_key": TOKEN}}
    with pytest.raises(ConfigError) as caught:
        validate_config(raw, host.catalog(), env={"CLOUDFLARE_ACCOUNT_ID": TOKEN})
    assert {p.path for p in caught.value.problems} == {"llm.model", "llm.account_id"}
    assert TOKEN not in str(caught.value)


def test_example_config_validates_with_both_variables_set(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # configs/cloudflare.yaml at the repository root, validated as `koboi validate` does.
    clean_env.chdir(tmp_path)  # no stray .env
    clean_env.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", ACCOUNT)
    config = load_config(EXAMPLE)
    assert config.llm.provider == "cloudflare"
    options = config.llm_options
    assert isinstance(options, CloudflareOptions)
    assert options.model == MODEL
    assert options.account_id == ACCOUNT
    assert options.api_key is not None and options.api_key.get_secret_value() == TOKEN
    assert config.tools.builtin == ["calculator"]


def test_example_config_without_the_variables_names_both(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLE)
    text = str(caught.value)
    assert "CLOUDFLARE_API_TOKEN" in text and "CLOUDFLARE_ACCOUNT_ID" in text


def test_readme_example_validates(clean_env: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    raw = yaml.safe_load(block)
    env = {"CLOUDFLARE_API_TOKEN": TOKEN, "CLOUDFLARE_ACCOUNT_ID": ACCOUNT}
    catalog_host = PluginHost(load_entry_points=False, strict=True)
    catalog_host.add_plugin(plugin, "cloudflare", dist="koboi-cloudflare")
    catalog_host.add_plugin(koboi_tools_basic.plugin, "tools-basic", dist="koboi-tools-basic")
    config = validate_config(raw, catalog_host.catalog(), env=env)
    assert isinstance(config.llm_options, CloudflareOptions)
    assert config.llm_options.options == {"max_tokens": 1024, "temperature": 0.2}


def test_replay_mode_needs_no_token_and_no_account(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under cache.mode replay the API is never called: a machine without a key can replay."""
    from koboi.config import validate_config

    for name in ("CLOUDFLARE_API_TOKEN", "CLOUDFLARE_ACCOUNT_ID"):
        monkeypatch.delenv(name, raising=False)
    llm = {"provider": "cloudflare", "model": "@cf/meta/llama-3.1-8b-instruct"}
    config = validate_config({"llm": llm, "cache": {"mode": "replay"}})
    assert config.llm_options.api_key is None
    with pytest.raises(Exception, match="CLOUDFLARE_API_TOKEN"):
        validate_config({"llm": llm})


def test_the_window_of_a_known_model_and_none_for_others(clean_env: pytest.MonkeyPatch) -> None:
    from koboi_cloudflare.provider import CloudflareProvider

    clean_env.setenv("CLOUDFLARE_API_TOKEN", TOKEN)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", ACCOUNT)
    assert CloudflareProvider(CloudflareOptions(model=MODEL)).context_window() == 24_000
    other = CloudflareOptions(model="@cf/qwen/qwq-32b")
    assert CloudflareProvider(other).context_window() is None
