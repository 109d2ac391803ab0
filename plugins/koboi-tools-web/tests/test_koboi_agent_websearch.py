"""koboi-agent's top-level ``websearch``: an alias of ``tools_web``."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi_tools_web.config import WebSettings


def _web(websearch: Any, **more: Any) -> WebSettings:
    raw = {"llm": {"provider": "scripted"}, "websearch": websearch, **more}
    section = validate_config(raw).section("tools_web")
    assert isinstance(section, WebSettings)
    return section


def test_mock_is_the_offline_backend() -> None:
    section = _web({"search": {"provider": "mock", "max_results": 4}})
    assert section.search.backend == "offline" and section.search.max_results == 4


def test_a_providers_block_and_fetch_settings_are_kept() -> None:
    section = _web(
        {
            "search": {"provider": "brave", "brave": {"api_key": "brv-123", "timeout": 9}},
            "fetch": {"provider": "httpx", "timeout": 12, "max_chars": 50000},
        }
    )
    assert section.search.backend == "brave" and section.search.timeout == 9
    assert section.search.api_key is not None
    assert section.search.api_key.get_secret_value() == "brv-123"
    assert section.timeout == 12 and section.max_chars == 50000
    assert _web({"search": {"provider": "ddg"}}).search.backend == "duckduckgo"


@pytest.mark.parametrize(
    ("websearch", "message"),
    [
        ({"search": {"provider": "serper"}}, "write tools_web.search.backend"),
        ({"fetch": {"provider": "firecrawl"}}, "web_fetch reads pages itself"),
        ({"search": {"provider": "brave", "brave": {"country": "id"}}}, "brave.country"),
        ({"custom_modules": ["my.search"]}, "register its tool from a koboi plugin"),
    ],
)
def test_what_has_no_counterpart_is_one_line_saying_what_to_write(
    websearch: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _web(websearch)
    problems = [p for p in info.value.problems if p.path == "websearch"]
    assert problems and message in problems[0].message, info.value.problems
    assert "\n" not in problems[0].message


def test_set_both_ways_differently_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tools_web\.search\.backend"):
        _web({"search": {"provider": "mock"}}, tools_web={"search": {"backend": "brave"}})
