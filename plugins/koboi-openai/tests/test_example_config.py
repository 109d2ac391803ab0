"""configs/openai.yaml, the example config of this provider, validates and says what it shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from koboi import ConfigError, load_config, validate_config
from koboi.plugins import PluginHost
from koboi_openai.config import OpenAIOptions

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "openai.yaml"
KEY = "sk-proj-TESTKEY0123456789abcdefABCDEF"


@pytest.fixture(autouse=True)
def _no_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_config reads .env in the working directory too: use an empty one.
    monkeypatch.chdir(tmp_path)


def test_the_example_config_validates_with_the_key_in_the_environment(
    host: PluginHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    config = load_config(CONFIG, host.catalog())
    assert config.llm.provider == "openai"
    options = config.llm_options
    assert isinstance(options, OpenAIOptions)
    assert options.model == "gpt-4o-mini"
    assert options.is_openai
    assert options.api_key is not None and options.api_key.get_secret_value() == KEY
    assert config.tools.builtin == ["calculator"]


def test_the_example_config_keeps_the_key_out_of_the_file() -> None:
    raw = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert "api_key" not in raw["llm"]
    assert not re.search(r"sk-[A-Za-z0-9]{8,}", CONFIG.read_text(encoding="utf-8"))


def test_without_the_key_it_says_which_variable_to_set(host: PluginHost) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(CONFIG, host.catalog())
    assert "OPENAI_API_KEY" in str(caught.value)
    assert str(CONFIG) in str(caught.value)


@pytest.mark.parametrize(
    ("commented", "needs"),
    [
        ({"model": "llama3.1", "base_url": "http://localhost:11434/v1"}, None),
        ({"model": "Qwen/Qwen2.5-7B-Instruct", "base_url": "http://localhost:8000/v1"}, None),
        (
            {
                "model": "openai/gpt-4o-mini",
                "base_url": "https://openrouter.ai/api/v1",
                "api_key_env_var": "OPENROUTER_API_KEY",
            },
            "OPENROUTER_API_KEY",
        ),
    ],
)
def test_the_commented_alternatives_validate_and_never_take_openai_api_key(
    host: PluginHost,
    monkeypatch: pytest.MonkeyPatch,
    commented: dict[str, Any],
    needs: str | None,
) -> None:
    text = CONFIG.read_text(encoding="utf-8")
    for key, value in commented.items():
        # The alternative really is in the file's comments, as written here.
        assert re.search(rf"#\s+{key}: {re.escape(value)}\s*$", text, re.MULTILINE), (key, value)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    if needs:
        monkeypatch.setenv(needs, "sk-or-v1-0123456789abcdef0123456789")
    raw = yaml.safe_load(text)
    raw["llm"].update(commented)
    config = validate_config(raw, host.catalog())
    options = config.llm_options
    assert not options.is_openai
    secret = options.api_key.get_secret_value() if options.api_key else None
    assert secret != KEY
    assert (secret is None) == (needs is None)
