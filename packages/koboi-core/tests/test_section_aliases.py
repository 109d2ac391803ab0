"""Section aliases: another top-level spelling of part of a plugin's section.

The kernel knows no alias by name: a plugin registers each with its section
(``register(section, model, aliases={...})``), and the kernel converts, merges,
reports and remembers it (``AgentConfig.spellings``, for ``koboi validate --suggest``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from koboi.config import load_config
from koboi.errors import ConfigError, PluginError
from koboi.hookspecs import hookimpl
from koboi.plugins import PluginHost

MINIMAL = 'llm: {provider: scripted, script: ["hello"]}\n'


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_minute: int | None = Field(default=None, description="Calls per minute.")
    per_session: int | None = Field(default=None, description="Calls per session.")


class WeatherSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    units: str = Field(default="metric", description="Units.")
    limits: Limits = Field(default_factory=Limits, description="Limits.")


def _throttle(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a mapping")
    if "window" in value:
        raise ValueError("window: has no counterpart; calls are counted per minute")
    return {"limits": {"per_minute": value.get("calls_per_minute")}}


def _host(aliases: dict[str, Any]) -> PluginHost:
    import koboi_scripted.plugin

    @hookimpl
    def koboi_register_config_sections(register: Any) -> None:
        register("weather", WeatherSection, description="Weather.", aliases=aliases)

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    host.add_plugin(
        SimpleNamespace(koboi_register_config_sections=koboi_register_config_sections), "weather"
    )
    return host


def _load(tmp_path: Path, host: PluginHost, text: str) -> Any:
    path = tmp_path / "agent.yaml"
    path.write_text(MINIMAL + textwrap.dedent(text))
    return load_config(path, host.catalog(), env={})


def test_an_alias_is_converted_into_its_section_and_remembered(tmp_path: Path) -> None:
    config = _load(tmp_path, _host({"throttle": _throttle}), "throttle: {calls_per_minute: 5}\n")
    section = config.section("weather")
    assert isinstance(section, WeatherSection)
    assert section.limits.per_minute == 5
    assert section.units == "metric"
    [spelling] = config.spellings
    assert (spelling.alias, spelling.section) == ("throttle", "weather")
    assert spelling.preferred == {"limits": {"per_minute": 5}}


def test_the_alias_merges_with_the_section_written_in_full(tmp_path: Path) -> None:
    text = "weather: {units: imperial, limits: {per_session: 3}}\nthrottle: {calls_per_minute: 5}\n"
    section = _load(tmp_path, _host({"throttle": _throttle}), text).section("weather")
    assert (section.units, section.limits.per_session, section.limits.per_minute) == (
        "imperial",
        3,
        5,
    )


def test_a_key_set_both_ways_differently_is_a_problem(tmp_path: Path) -> None:
    text = "weather: {limits: {per_minute: 9}}\nthrottle: {calls_per_minute: 5}\n"
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _host({"throttle": _throttle}), text)
    [problem] = info.value.problems
    assert problem.path == "throttle"
    assert "sets weather.limits.per_minute, which the config also sets" in problem.message


def test_a_converter_refusal_is_a_problem_of_the_alias(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _host({"throttle": _throttle}), "throttle: {window: 30}\n")
    [problem] = info.value.problems
    assert problem.path == "throttle"
    assert problem.message == "window: has no counterpart; calls are counted per minute"


def test_values_the_converter_passes_on_are_checked_by_the_section_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _host({"throttle": _throttle}), "throttle: {calls_per_minute: many}\n")
    assert [p.path for p in info.value.problems] == ["weather.limits.per_minute"]


def test_no_alias_without_its_plugin(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _host({}), "throttle: {calls_per_minute: 5}\n")
    assert info.value.problems[0].message == "unknown section"


@pytest.mark.parametrize("name", ["agent", "sandbox", "extends", "weather"])
def test_kernel_sections_and_the_own_name_cannot_be_aliases(name: str) -> None:
    host = _host({name: _throttle})
    with pytest.raises(PluginError, match="cannot be an alias"):
        host.catalog()


def test_a_converter_must_be_callable() -> None:
    with pytest.raises(PluginError, match="converter must be callable"):
        _host({"throttle": "not callable"}).catalog()
