"""Config loading: every error names the file, the key path and what to do."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from koboi.config import config_schema, load_config, store_scheme
from koboi.errors import ConfigError
from koboi.plugins import PluginHost

from .conftest import HintsPlugin

MINIMAL = """
llm:
  provider: scripted
  script: ["hello"]
"""


def write(tmp_path: Path, text: str, name: str = "agent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path: Path, host: PluginHost, text: str) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, host.catalog(), env={})
    return [p.render(str(path)) for p in info.value.problems]


def test_minimal_config_gets_defaults(tmp_path: Path, host: PluginHost) -> None:
    config = load_config(write(tmp_path, MINIMAL), host.catalog(), env={})
    assert config.agent.mode == "act"
    assert config.agent.max_iterations == 20
    assert config.llm.provider == "scripted"
    assert config.store.url is None  # resolved later: KOBOI_STORE, a default store, memory://
    assert config.sandbox.backend == "passthrough"
    assert config.base_dir == tmp_path.resolve()
    assert len(config.config_hash) == 16


def test_unknown_section_suggests_the_close_one(tmp_path: Path, host: PluginHost) -> None:
    found = problems(tmp_path, host, MINIMAL + "agnet: {name: x}\n")
    assert len(found) == 1
    assert found[0].endswith("agnet: unknown section (did you mean 'agent'?)")
    assert found[0].startswith(str(tmp_path / "agent.yaml"))


def test_first_party_section_not_installed_says_what_to_install(tmp_path: Path) -> None:
    # A host without the installed plugins (koboi-rag may be installed here): the
    # scripted model for the config's llm, and the hint.
    import koboi_scripted.plugin

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    host.add_plugin(HintsPlugin({"section": {"rag": "koboi-rag"}}), "test-hints")
    found = problems(tmp_path, host, MINIMAL + "rag: {top_k: 3}\n")
    assert found == [
        f"{tmp_path / 'agent.yaml'}: rag: no installed plugin owns this section (install koboi-rag)"
    ]


def test_unknown_key_in_kernel_section(tmp_path: Path, host: PluginHost) -> None:
    found = problems(tmp_path, host, MINIMAL + "agent: {max_iteration: 3}\n")
    assert found == [
        f"{tmp_path / 'agent.yaml'}: agent.max_iteration: unknown key (did you mean 'max_iterations'?)"
    ]


def test_every_problem_is_reported_at_once(
    tmp_path: Path, add_hints: Callable[..., PluginHost]
) -> None:
    # Names whose plugin is not installed here, which a hint names.
    host = add_hints(
        sandbox={"microvm": "koboi-sandbox-microvm"}, tool={"crystal_ball": "koboi-tools-oracle"}
    )
    text = """
    agent: {mode: turbo, max_iterations: 0}
    llm: {provider: scripted, scirpt: []}
    tools: {builtin: [calculator, calculater, crystal_ball]}
    store: {url: "mongodb://x/db"}
    sandbox: {backend: microvm}
    """
    found = problems(tmp_path, host, text)
    joined = "\n".join(found)
    assert "agent.mode: Input should be 'chat', 'plan', 'act', 'auto' or 'yolo'" in joined
    assert "agent.max_iterations: Input should be greater than or equal to 1" in joined
    assert "llm.scirpt: unknown key (did you mean 'script'?)" in joined
    assert (
        "tools.builtin[1]: unknown tool 'calculater' (did you mean 'calculator'?; known tools:"
        in joined
    )
    assert (
        "tools.builtin[2]: unknown tool 'crystal_ball' (install koboi-tools-oracle; known tools:"
        in joined
    )
    assert (
        "store.url: no installed store handles 'mongodb://' URLs (installed store schemes: "
        in joined
    )
    assert (
        "sandbox.backend: unknown sandbox backend 'microvm' (install koboi-sandbox-microvm)"
        in joined
    )
    assert len(found) == 7
    error = ConfigError([], None)
    assert isinstance(error, Exception)


def test_missing_llm_is_reported(tmp_path: Path, host: PluginHost) -> None:
    found = problems(tmp_path, host, "agent: {name: x}\n")
    assert found == [
        f"{tmp_path / 'agent.yaml'}: llm: is required (add an llm section, e.g. llm: {{provider: scripted}})"
    ]


def test_unknown_provider_hints_the_distribution(
    tmp_path: Path, add_hints: Callable[..., PluginHost]
) -> None:
    # A name whose plugin is not installed here, which a hint names.
    host = add_hints(provider={"gemini": "koboi-gemini"})
    found = problems(tmp_path, host, "llm: {provider: gemini, model: g}\n")
    assert found == [
        f"{tmp_path / 'agent.yaml'}: llm.provider: unknown provider 'gemini' (install koboi-gemini)"
    ]


def test_named_providers_map(tmp_path: Path, host: PluginHost) -> None:
    text = """
    providers:
      offline: {provider: scripted, script: ["hi"]}
    llm: offline
    """
    config = load_config(write(tmp_path, text), host.catalog(), env={})
    assert config.llm.provider == "scripted"
    assert set(config.providers) == {"offline"}
    found = problems(tmp_path, host, "providers: {offline: {provider: scripted}}\nllm: ofline\n")
    assert (
        "llm: names provider 'ofline', which the providers map does not define (did you mean 'offline'?)"
        in found[0]
    )


def test_unset_variable_names_variable_and_key_path(tmp_path: Path, host: PluginHost) -> None:
    text = MINIMAL + "agent: {system_prompt: 'You are ${PERSONA}'}\n"
    found = problems(tmp_path, host, text)
    assert len(found) == 1
    assert "agent.system_prompt: environment variable PERSONA is not set" in found[0]
    assert "${PERSONA:default}" in found[0]


def test_interpolation_and_defaults(tmp_path: Path, host: PluginHost) -> None:
    text = MINIMAL + "agent: {name: '${NAME:fallback}', max_iterations: '${STEPS}'}\n"
    config = load_config(write(tmp_path, text), host.catalog(), env={"STEPS": "7"})
    assert config.agent.name == "fallback"
    assert config.agent.max_iterations == 7
    assert config.raw["agent"]["max_iterations"] == "${STEPS}"  # secrets stay in their ${VAR} form


def test_dotenv_beside_the_config_is_loaded_without_overriding(
    tmp_path: Path, host: PluginHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KOBOI_TEST_PERSONA", raising=False)
    monkeypatch.setenv("KOBOI_TEST_KEEP", "from-env")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("KOBOI_TEST_PERSONA='a pirate'\nKOBOI_TEST_KEEP=from-file\n")
    text = MINIMAL + "agent: {system_prompt: '${KOBOI_TEST_PERSONA}', name: '${KOBOI_TEST_KEEP}'}\n"
    try:
        config = load_config(write(tmp_path, text), host.catalog())
        assert config.agent.system_prompt == "a pirate"
        assert config.agent.name == "from-env"
    finally:
        os.environ.pop("KOBOI_TEST_PERSONA", None)


def test_extends_merges_base_first(tmp_path: Path, host: PluginHost) -> None:
    write(
        tmp_path,
        MINIMAL + "agent: {name: base, max_iterations: 3}\ntools: {builtin: [calculator]}\n",
        "base.yaml",
    )
    child = write(tmp_path, "extends: base.yaml\nagent: {name: child}\n", "child.yaml")
    config = load_config(child, host.catalog(), env={})
    assert (config.agent.name, config.agent.max_iterations) == ("child", 3)
    assert config.tools.builtin == ["calculator"]


def test_extends_cycle_is_an_error(tmp_path: Path, host: PluginHost) -> None:
    write(tmp_path, "extends: b.yaml\n", "a.yaml")
    write(tmp_path, "extends: a.yaml\n", "b.yaml")
    with pytest.raises(ConfigError, match="extends cycle"):
        load_config(tmp_path / "a.yaml", host.catalog(), env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("llm: [unclosed\n", "invalid YAML: line 2, column 1"),
        (
            "llm: {provider: scripted}\nllm: {provider: scripted}\n",
            "duplicate key 'llm' (first on line 1)",
        ),
        ("- just\n- a list\n", "the top level must be a mapping of sections, not list"),
    ],
)
def test_yaml_problems(tmp_path: Path, host: PluginHost, text: str, expected: str) -> None:
    found = problems(tmp_path, host, text)
    assert len(found) == 1 and expected in found[0]


def test_configs_are_parsed_by_libyaml_when_pyyaml_has_it(tmp_path: Path, host: PluginHost) -> None:
    """PyYAML's pure-Python parser took seconds for a config with a long script (a
    2,500-step scripted model); its wheels carry libyaml, which the reader uses, with
    the duplicate-key rule and the line numbers of the errors unchanged (above)."""
    import yaml

    from koboi import config_files

    parser = yaml.cyaml.CParser if yaml.__with_libyaml__ else yaml.parser.Parser
    assert issubclass(config_files._UniqueKeyLoader, parser)
    script = "".join(f"    - reply: 'answer {i}'\n" for i in range(2000))
    path = write(tmp_path, f"llm:\n  provider: scripted\n  script:\n{script}")
    config = load_config(path, host.catalog(), env={})
    assert len(config.llm.model_dump()["script"]) == 2000


def test_missing_file(tmp_path: Path, host: PluginHost) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found"):
        load_config(tmp_path / "nope.yaml", host.catalog())


def test_provider_options_are_validated_by_the_plugin_model(
    tmp_path: Path, host: PluginHost
) -> None:
    found = problems(tmp_path, host, "llm: {provider: scripted, script: [{}]}\n")
    assert len(found) == 1 and found[0].split(": ", 1)[1].startswith("llm.script[0]")


def test_plugin_section_is_validated_and_returned(tmp_path: Path) -> None:
    from pydantic import BaseModel, ConfigDict, Field

    from koboi import hookimpl

    class Weather(BaseModel):
        model_config = ConfigDict(extra="forbid")
        units: str = Field("metric", description="units")

    class Plugin:
        @hookimpl
        def koboi_register_config_sections(self, register):  # type: ignore[no-untyped-def]
            register("weather", Weather)

    host = PluginHost(strict=True)
    host.load()
    host.add_plugin(Plugin(), "weather")
    config = load_config(
        write(tmp_path, MINIMAL + "weather: {units: imperial}\n"), host.catalog(), env={}
    )
    section = config.section("weather")
    assert isinstance(section, Weather) and section.units == "imperial"
    found = problems(tmp_path, host, MINIMAL + "weather: {unit: imperial}\n")
    assert "weather.unit: unknown key (did you mean 'units'?)" in found[0]
    schema = config_schema(host.catalog())
    assert schema["properties"]["weather"]["x-koboi-plugin"] == "weather"
    assert "calculator" in schema["x-koboi-tools"]


def test_store_scheme() -> None:
    assert store_scheme("postgresql+psycopg://u@h/db") == "postgresql"
    assert store_scheme("sqlite:///.koboi/koboi.db") == "sqlite"
    assert store_scheme("memory://") == "memory"
    assert store_scheme("no-scheme") is None


def test_store_scheme_hint_names_the_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "store-sql")
    host = PluginHost(strict=True)
    host.add_plugin(HintsPlugin({"store_scheme": {"sqlite": "koboi-store-sql"}}), "test-hints")
    found = problems(tmp_path, host, MINIMAL + "store: {url: 'sqlite:///x.db'}\n")
    assert found[0].endswith(
        "store.url: no installed store handles 'sqlite://' URLs (install koboi-store-sql)"
    )


def test_build_store_uses_the_plugin_for_the_scheme(tmp_path: Path, host: PluginHost) -> None:
    from koboi.config import build_store
    from koboi.errors import KoboiError
    from koboi.store import InMemoryStore

    assert isinstance(build_store("memory://", tmp_path, host.catalog()), InMemoryStore)
    with pytest.raises(
        KoboiError, match=r"no installed store handles 'mongodb://' URLs \(installed"
    ):
        build_store("mongodb://db/x", tmp_path, host.catalog())
