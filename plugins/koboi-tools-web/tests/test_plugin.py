"""The plugin as the kernel sees it: entry point, registrations, config section, agent runs."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from typing import Any

import pytest

from koboi import ConfigError, KoboiAgent, PluginHost, validate_config
from koboi.tools import Risk
from koboi_testing.wire import Reply, WireServer
from koboi_tools_web.config import CorpusDocument, SearchSettings, WebSettings
from koboi_tools_web.tools import make_fetch_tool, make_search_tool

BASE: dict[str, Any] = {
    "llm": {"provider": "scripted"},
    "tools": {"builtin": ["web_fetch", "web_search"]},
    # Never the default durable store, which lives beside the working directory.
    "store": {"url": "memory://"},
}


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "tools-web"]
    assert ep.value == "koboi_tools_web.plugin"


def test_registrations_are_owned_by_the_plugin(host: PluginHost) -> None:
    catalog = host.catalog()
    section = catalog.sections.get("tools_web")
    assert section is not None and section.plugin == "tools-web"
    assert section.target is WebSettings
    for name in ("web_fetch", "web_search"):
        entry = catalog.tools.get(name)
        assert entry is not None and entry.plugin == "tools-web"


@pytest.mark.parametrize("model", [WebSettings, SearchSettings, CorpusDocument])
def test_every_setting_is_described(model: Any) -> None:
    for name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{name} has no description"


def test_section_is_validated(host: PluginHost) -> None:
    config = validate_config(
        {
            **BASE,
            "tools_web": {
                "allow_hosts": ["wiki.corp"],
                "allow_networks": ["10.20.0.0/16"],
                "search": {"backend": "duckduckgo"},
            },
        },
        host.catalog(),
    )
    section = config.section("tools_web")
    assert isinstance(section, WebSettings)
    assert section.allow_networks == ["10.20.0.0/16"]
    assert make_fetch_tool(config).fetcher.policy.host_allowed("wiki.corp")
    assert make_search_tool(config).backend.name == "duckduckgo"


def test_defaults_without_a_section(host: PluginHost) -> None:
    config = validate_config(BASE, host.catalog())
    assert config.section("tools_web") is None
    fetch, search = make_fetch_tool(config), make_search_tool(config)
    assert fetch.risk is Risk.MODERATE and fetch.idempotent
    assert search.backend.name == "offline" and search.risk is Risk.SAFE


def test_unknown_keys_and_bad_values_are_reported(host: PluginHost) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config(
            {
                **BASE,
                "tools_web": {
                    "allow_host": ["x"],
                    "allow_networks": ["10.0.0.1/8"],
                    "search": {"backend": "bing"},
                },
            },
            host.catalog(),
        )
    problems = {p.path: p for p in caught.value.problems}
    assert "did you mean 'allow_hosts'" in problems["tools_web.allow_host"].hint
    assert any(path.startswith("tools_web.allow_networks") for path in problems)
    assert any(path.startswith("tools_web.search.backend") for path in problems)


def test_the_api_key_is_never_shown(host: PluginHost) -> None:
    config = validate_config(
        {**BASE, "tools_web": {"search": {"backend": "brave", "api_key": "sekrit-0123456789"}}},
        host.catalog(),
    )
    assert "sekrit" not in repr(config.section("tools_web"))


def test_loading_the_plugin_does_not_import_httpx() -> None:
    code = (
        "import sys, koboi_tools_web.plugin; "
        "print('httpx' in sys.modules, 'koboi_tools_web.fetch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.anyio
async def test_an_agent_fetches_a_page_it_found(host: PluginHost) -> None:
    with WireServer() as server:
        server.default = Reply.raw(
            "<title>Launch</title><h1>Launch day</h1><p>The launch is on 3 May.</p>",
            content_type="text/html",
        )
        page = f"http://127.0.0.1:{server.port}/launch"
        config = {
            "llm": {
                "provider": "scripted",
                "script": [
                    {"tool_calls": [{"name": "web_search", "arguments": {"query": "launch date"}}]},
                    {"tool_calls": [{"name": "web_fetch", "arguments": {"url": page}}]},
                    "The launch is on 3 May.",
                ],
            },
            "tools": {"builtin": ["web_fetch", "web_search"]},
            "agent": {"approval_risk": "destructive"},
            "store": {"url": "memory://"},
            "tools_web": {
                "allow_networks": ["127.0.0.1/32"],
                "search": {
                    "corpus": [{"title": "Launch date", "url": page, "text": "When we launch."}]
                },
            },
        }
        async with KoboiAgent.from_dict(config, host=host) as agent:
            result = await agent.run("When is the launch?")
            events = await agent.store.read(result.session_id)
    assert result.outcome == "completed", result
    assert result.output == "The launch is on 3 May."
    finished = {e.data["name"]: e.data for e in events if e.type == "tool_call_finished"}
    assert page in finished["web_search"]["content"]
    assert "# Launch day\n\nThe launch is on 3 May." in finished["web_fetch"]["content"]
    assert not finished["web_fetch"]["is_error"]
    assert [r.path for r in server.requests] == ["/launch"]
