"""``koboi plugins list/inspect`` and ``--version``, including with broken plugins."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from koboi import hookimpl, tool
from koboi.hookspecs import hookspec
from koboi.plugins import PluginHost
from koboi_cli.app import app

UseHost = Callable[[PluginHost], PluginHost]


class DemoSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    greeting: str = Field(default="hi", description="What to say.")


@tool(risk="destructive", idempotent=False)
def wipe(path: str) -> str:
    """Delete a file."""
    return path


class DemoPlugin:
    @hookimpl
    def koboi_register_config_sections(self, register: Callable[..., None]) -> None:
        register("demo", DemoSection, description="Demo settings.")

    @hookimpl
    def koboi_register_tools(self, register: Callable[..., None]) -> None:
        register(wipe)
        register("later", lambda config: wipe, description="Built per agent.")

    @hookimpl
    def koboi_register_commands(self, register: Callable[..., None]) -> None:
        register("demo-hello", "koboi_cli_demo_missing:app", help="Say hello.")

    @hookimpl
    def koboi_register_run_sources(self, register: Callable[..., None]) -> None:
        register(
            "demo-files", "koboi_cli_demo_missing:run", suffixes=(".demo",), description="Demo."
        )


class BrokenRegistration:
    @hookimpl
    def koboi_register_tools(self, register: Callable[..., None]) -> None:
        raise RuntimeError("the tool table is on fire")


def demo_host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=False)
    host.add_plugin(DemoPlugin(), "demo", dist="koboi-demo", version="1.2.3")
    host.add_plugin(BrokenRegistration(), "broken", dist="koboi-broken", version="0.0.1")
    return host


def test_list_real_plugins(runner: CliRunner) -> None:
    result = runner.invoke(app, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "DISTRIBUTION", "VERSION", "STATUS", "REASON"]
    assert lines[1].split()[:3] == ["builtin", "koboi-core", "(built-in)"]
    ids = [line.split()[0] for line in lines[1:]]
    # Other workspace plugins (koboi-store-sql, the docs' example plugin) may be
    # installed too: built-ins come first, then plugins by id.
    assert ids[0] == "builtin"
    assert {"scripted", "tools-basic"} <= set(ids)
    assert ids[1:] == sorted(ids[1:])


def test_list_shows_broken_plugins(runner: CliRunner, use_host: UseHost) -> None:
    use_host(demo_host())
    result = runner.invoke(app, ["plugins", "list", "--check"])
    assert result.exit_code == 0, result.output
    broken = next(line for line in result.stdout.splitlines() if line.startswith("broken"))
    assert "failed" in broken
    assert "the tool table is on fire" in broken

    as_json = runner.invoke(app, ["plugins", "list", "--check", "--json"])
    data = {p["id"]: p for p in json.loads(as_json.stdout)}
    assert data["builtin"]["builtin"] is True
    assert data["demo"] == {
        "id": "demo",
        "dist": "koboi-demo",
        "version": "1.2.3",
        "builtin": False,
        "status": "loaded",
        "reason": "",
        "defines": [],
        "implements": data["demo"]["implements"],
        "waiting": [],
    }
    assert "koboi_register_commands" in data["demo"]["implements"]
    assert data["broken"]["status"] == "failed"


def test_inspect_json_lists_registrations(runner: CliRunner, use_host: UseHost) -> None:
    use_host(demo_host())
    result = runner.invoke(app, ["plugins", "inspect", "demo", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "loaded"
    assert data["hooks"] == [
        "koboi_register_commands",
        "koboi_register_config_sections",
        "koboi_register_run_sources",
        "koboi_register_tools",
    ]
    registered = data["registered"]
    (section,) = registered["sections"]
    assert section["name"] == "demo"
    assert section["schema"]["properties"]["greeting"]["description"] == "What to say."
    tools = {t["name"]: t for t in registered["tools"]}
    assert tools["wipe"]["risk"] == "destructive"
    assert tools["wipe"]["idempotent"] is False
    assert tools["later"]["factory"] is True
    assert registered["commands"] == [
        {"name": "demo-hello", "description": "Say hello.", "target": "koboi_cli_demo_missing:app"}
    ]
    assert registered["run_sources"] == [
        {
            "name": "demo-files",
            "description": "Demo.",
            "target": "koboi_cli_demo_missing:run",
            "suffixes": [".demo"],
        }
    ]


def test_inspect_text(runner: CliRunner, use_host: UseHost) -> None:
    use_host(demo_host())
    result = runner.invoke(app, ["plugins", "inspect", "demo"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "distribution:  koboi-demo 1.2.3" in text
    assert "wipe [risk destructive, not idempotent] - Delete a file." in text
    assert "demo-hello [koboi_cli_demo_missing:app] - Say hello." in text

    broken = runner.invoke(app, ["plugins", "inspect", "broken"])
    assert broken.exit_code == 0
    assert "status:        failed" in broken.stdout
    assert "the tool table is on fire" in broken.stdout


class Greeter:
    """An object registered through another plugin's hook (an object with no repr of its own)."""


class Tagged:
    def __repr__(self) -> str:
        return "Tagged('x')"


def greet() -> str:
    return "hi"


class Specs:
    @hookspec
    def koboi_owner_register_things(self, register: Any) -> None:
        """Things."""


class Owner:
    @hookimpl
    def koboi_register_hookspecs(self, register: Any) -> None:
        register(Specs)


class Things:
    @hookimpl
    def koboi_owner_register_things(self, register: Any) -> None:
        register("object", Greeter())
        register("tagged", Tagged())
        register("class", Greeter)
        register("function", greet)
        register("number", 18.0)


def test_inspect_names_registered_objects_readably(runner: CliRunner, use_host: UseHost) -> None:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(Owner(), "owner")
    host.add_plugin(Things(), "things")
    use_host(host)
    shown = runner.invoke(app, ["plugins", "inspect", "things", "--json"])
    assert shown.exit_code == 0, shown.output
    targets = {
        e["name"]: e["target"] for e in json.loads(shown.stdout)["registered"][HOOK_OF_THINGS]
    }
    here = __name__
    assert targets == {
        "object": f"{here}.Greeter instance",  # not <... object at 0x...>
        "tagged": "Tagged('x')",  # an object that says more itself
        "class": f"{here}.Greeter",
        "function": f"{here}.greet",
        "number": "18.0",
    }
    text = runner.invoke(app, ["plugins", "inspect", "things"]).stdout
    assert f"object [{here}.Greeter instance]" in text and " at 0x" not in text


HOOK_OF_THINGS = "koboi_owner_register_things"


def test_inspect_real_plugin(runner: CliRunner) -> None:
    result = runner.invoke(app, ["plugins", "inspect", "tools-basic"])
    assert result.exit_code == 0, result.output
    assert "calculator [risk safe, idempotent]" in result.stdout
    assert "koboi_register_tools" in result.stdout


def test_inspect_unknown_id(runner: CliRunner, use_host: UseHost) -> None:
    use_host(demo_host())
    result = runner.invoke(app, ["plugins", "inspect", "nope"])
    assert result.exit_code == 1
    assert result.stderr == "error: unknown plugin 'nope'; known plugins: builtin, broken, demo\n"


def test_version_lists_every_installed_plugin_from_metadata(
    runner: CliRunner, broken_dist: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from importlib import metadata

    # A second distribution, disabled by the environment.
    info = tmp_path / "site" / "koboi_idle-1.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: koboi-idle\nVersion: 1.4.0\n")
    (info / "entry_points.txt").write_text("[koboi.plugins]\nidle = koboi_idle_plugin\n")
    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "idle")
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("koboi-core ")
    assert lines[1].startswith("koboi-cli ")
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert rows["builtin"][0] == "koboi-core" and rows["builtin"][2] == "built-in"
    # Read from metadata, not imported: the plugin whose import fails is "installed".
    assert rows["kaput"] == ["koboi-kaput", "0.3.0", "installed"]
    assert "koboi_kaput_plugin" not in sys.modules
    assert rows["idle"] == ["koboi-idle", "1.4.0", "disabled"]
    installed = {
        ep.name: ep.dist.version
        for ep in metadata.entry_points(group="koboi.plugins")
        if ep.dist is not None
    }
    for plugin_id, version in installed.items():
        assert rows[plugin_id][1] == version, plugin_id


# -- a plugin that cannot even be imported, found through real entry points ------


@pytest.fixture
def broken_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Install (on sys.path) a distribution whose plugin module fails to import."""
    site = tmp_path / "site"
    info = site / "koboi_kaput-0.3.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: koboi-kaput\nVersion: 0.3.0\n"
        "Requires-Dist: koboi-core>=0.1,<0.2\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text(
        "[koboi.plugins]\nkaput = koboi_kaput_plugin\n", encoding="utf-8"
    )
    (site / "koboi_kaput_plugin.py").write_text(
        textwrap.dedent("""
            raise ImportError("koboi_kaput needs libkaput.so")
        """),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(site))
    return "kaput"


def test_plugins_list_works_with_an_unimportable_plugin_even_when_strict(
    runner: CliRunner, broken_dist: str, write_config: Callable[[str], Any]
) -> None:
    # KOBOI_STRICT_PLUGINS=1 is set for every test (conftest)
    result = runner.invoke(app, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("kaput"))
    assert "koboi-kaput" in row and "failed" in row
    assert "import failed: ImportError: koboi_kaput needs libkaput.so" in row

    inspect = runner.invoke(app, ["plugins", "inspect", "kaput"])
    assert inspect.exit_code == 0
    assert "koboi-core:    <0.2,>=0.1" in inspect.stdout or ">=0.1" in inspect.stdout

    assert runner.invoke(app, ["--help"]).exit_code == 0
    assert runner.invoke(app, ["--version"]).exit_code == 0

    # Strict mode makes using the broken install an error: one clear line, no traceback.
    config = write_config("llm: {provider: scripted}\n")
    validate = runner.invoke(app, ["validate", str(config)])
    assert validate.exit_code == 1
    assert validate.stderr.startswith("error: plugin 'kaput' (koboi-kaput 0.3.0): import failed")
    assert "Traceback" not in validate.output


def test_plugins_list_shows_registration_failures(runner: CliRunner, use_host: UseHost) -> None:
    from koboi import hookimpl
    from koboi.plugins import PluginHost

    class Flaky:
        @hookimpl
        def koboi_register_tools(self, register):  # type: ignore[no-untyped-def]
            raise ValueError("cannot build my tools")

    plugin_host = PluginHost(load_entry_points=False, strict=False)
    plugin_host.add_plugin(Flaky(), "flaky")
    use_host(plugin_host)
    # Registration always runs: a plugin whose registration fails is never shown "loaded".
    plain = runner.invoke(app, ["plugins", "list", "--json"])
    assert plain.exit_code == 0
    flaky = {p["id"]: p for p in json.loads(plain.stdout)}["flaky"]
    assert flaky["status"] == "failed"
    assert "registration failed: ValueError: cannot build my tools" in flaky["reason"]


class ColourSpecs:
    @hookspec
    def koboi_owner_register_colours(self, register: Callable[..., None]) -> None:
        """Register colours."""


class ColourOwner:
    @hookimpl
    def koboi_register_hookspecs(self, register: Callable[..., None]) -> None:
        register(ColourSpecs)


class ColourUser:
    @hookimpl
    def koboi_owner_register_colours(self, register: Callable[..., None]) -> None:
        register("teal", "#008080", description="A blue-green.")


def test_inspect_shows_what_a_plugin_registered_through_another_plugins_hook(
    runner: CliRunner, use_host: UseHost
) -> None:
    host = PluginHost(load_entry_points=False, strict=False)
    host.add_plugin(ColourOwner(), "owner")
    host.add_plugin(ColourUser(), "user")
    use_host(host)
    shown = runner.invoke(app, ["plugins", "inspect", "user"])
    assert shown.exit_code == 0, shown.output
    assert "registered:    nothing" not in shown.stdout
    assert "koboi_owner_register_colours:" in shown.stdout
    assert "teal ['#008080'] - A blue-green." in shown.stdout
    data = json.loads(runner.invoke(app, ["plugins", "inspect", "user", "--json"]).stdout)
    assert [e["name"] for e in data["registered"]["koboi_owner_register_colours"]] == ["teal"]
