"""The plugin: its entry point, its registration, and what loading it imports."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pluggy
import pytest
import yaml
from pydantic import SecretStr

from koboi import hookspecs
from koboi_anthropic.options import AnthropicOptions
from koboi_anthropic.provider import AnthropicProvider

README = Path(__file__).resolve().parents[1] / "README.md"


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "anthropic"]
    assert ep.value == "koboi_anthropic.plugin"


@pytest.mark.anyio
async def test_registers_the_anthropic_provider(api_key: str) -> None:
    from koboi_anthropic import plugin

    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    pm.hook.koboi_register_providers(register=lambda *a, **kw: calls.append((a, kw)))
    ((args, kwargs),) = calls
    name, factory = args
    assert name == "anthropic"
    assert kwargs["options"] is AnthropicOptions
    assert kwargs["description"]
    provider = factory(AnthropicOptions(model="claude-sonnet-4-5", api_key=SecretStr(api_key)))
    try:
        assert isinstance(provider, AnthropicProvider)
        assert (provider.name, provider.model) == ("anthropic", "claude-sonnet-4-5")
    finally:
        await provider.aclose()


def test_loading_the_plugin_imports_neither_httpx_nor_the_provider() -> None:
    code = (
        "import sys, koboi_anthropic.plugin as p\n"
        "p.koboi_register_providers(lambda *a, **k: None)\n"
        "print('httpx' in sys.modules, 'koboi_anthropic.provider' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_every_option_is_described() -> None:
    for name, field in AnthropicOptions.model_fields.items():
        assert field.description, f"{name} has no description"


def test_readme_config_is_valid(monkeypatch: pytest.MonkeyPatch, api_key: str) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", api_key)
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    assert blocks
    for block in blocks:
        llm = dict(yaml.safe_load(block)["llm"])
        assert llm.pop("provider") == "anthropic"
        AnthropicOptions.model_validate(llm)


@pytest.mark.anyio
async def test_cache_identity_has_the_settings_but_no_credential(
    provider_options: Any, api_key: str
) -> None:
    headers = {"authorization-extra": api_key}
    provider = AnthropicProvider(
        provider_options("http://127.0.0.1:9", options={"temperature": 0}, headers=headers)
    )
    try:
        identity = provider.cache_identity()
        assert identity["provider"] == "anthropic"
        assert identity["model"] == "claude-test-1"
        assert identity["options"] == {"temperature": 0}
        assert identity["max_tokens"] == 4096
        assert api_key not in repr(identity)
    finally:
        await provider.aclose()
