"""Plugin commands: listed without importing their target, loaded when invoked."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from koboi import hookimpl
from koboi.plugins import PluginHost
from koboi_cli.app import app

TARGET = "koboi_cli_demo_commands"

TARGET_SOURCE = '''
import typer

hello_app = typer.Typer()


@hello_app.command()
def hello(name: str = "world") -> None:
    """Say hello."""
    print(f"Hello {name}")


def greet(name: str, shout: bool = False) -> None:
    """Greet someone (a plain function)."""
    text = f"Greetings, {name}"
    print(text.upper() if shout else text)


_clicky_app = typer.Typer()


@_clicky_app.command()
def clicky() -> None:
    print("click command ran")


clicky_command = typer.main.get_command(_clicky_app)

not_a_command = 42
'''


class CommandPlugin:
    @hookimpl
    def koboi_register_commands(self, register: Callable[..., None]) -> None:
        register("hello", f"{TARGET}:hello_app", help="Say hello from a plugin.")
        register("greet", f"{TARGET}:greet", help="Greet someone.")
        register("clicky", f"{TARGET}:clicky_command")
        register("numb", f"{TARGET}:not_a_command", help="Not a command.")
        register("gone", "koboi_cli_no_such_module:app", help="Its module is missing.")
        register("run", f"{TARGET}:hello_app", help="Collides with the built-in.")


@pytest.fixture
def command_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_host: Callable[[PluginHost], PluginHost]
) -> Iterator[PluginHost]:
    (tmp_path / f"{TARGET}.py").write_text(textwrap.dedent(TARGET_SOURCE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    host = PluginHost(load_entry_points=False, strict=False)
    host.add_plugin(CommandPlugin(), "cmds", dist="koboi-cmds", version="0.1")
    use_host(host)
    yield host
    sys.modules.pop(TARGET, None)


def test_help_lists_plugin_commands_without_importing_them(
    runner: CliRunner, command_host: PluginHost
) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert TARGET not in sys.modules
    assert "koboi_cli_no_such_module" not in sys.modules
    assert "hello" in result.stdout
    assert "Say hello from a plugin. [plugin: cmds]" in result.stdout
    assert "gone" in result.stdout
    assert "warning: plugin 'cmds' registers command 'run', which is a built-in" in result.stderr


def test_typer_app_target(runner: CliRunner, command_host: PluginHost) -> None:
    result = runner.invoke(app, ["hello", "--name", "Ann"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello Ann\n"
    assert TARGET in sys.modules


def test_plain_function_target(runner: CliRunner, command_host: PluginHost) -> None:
    result = runner.invoke(app, ["greet", "Bob", "--shout"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "GREETINGS, BOB\n"
    help_text = runner.invoke(app, ["greet", "--help"])
    assert help_text.exit_code == 0
    assert "Greet someone (a plain function)." in help_text.stdout


def test_click_command_target(runner: CliRunner, command_host: PluginHost) -> None:
    result = runner.invoke(app, ["clicky"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "click command ran\n"


def test_builtin_wins_a_name_collision(
    runner: CliRunner, command_host: PluginHost, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    assert "Run an agent on one message" in result.stdout
    assert TARGET not in sys.modules


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gone", "ModuleNotFoundError: No module named 'koboi_cli_no_such_module'"),
        ("numb", "TypeError: 42 is not a typer.Typer app, a click command or a function"),
    ],
)
def test_broken_plugin_command_is_one_error_line(
    runner: CliRunner, command_host: PluginHost, name: str, why: str
) -> None:
    result = runner.invoke(app, [name])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: command {name!r} of plugin 'cmds' could not be loaded from "
        f"{'koboi_cli_no_such_module:app' if name == 'gone' else TARGET + ':not_a_command'!r}: "
        f"{why}"
    ]
    # Other commands are unaffected.
    assert runner.invoke(app, ["hello"]).stdout == "Hello world\n"


def test_unknown_command_is_a_usage_error(runner: CliRunner, command_host: PluginHost) -> None:
    result = runner.invoke(app, ["helo"])
    assert result.exit_code == 2
    assert "No such command 'helo'" in result.output


class CommandHints:
    @hookimpl
    def koboi_register_hints(self, register: Callable[..., None]) -> None:
        register("command", "forecast", "koboi-weather")


def test_a_missing_command_with_a_hint_says_what_to_install(
    runner: CliRunner, command_host: PluginHost
) -> None:
    command_host.add_plugin(CommandHints(), "hints", dist="koboi-hints", version="0.1")
    result = runner.invoke(app, ["forecast", "--days", "3"])
    assert result.exit_code == 2
    assert (
        "No such command 'forecast': it comes with koboi-weather (install koboi-weather, "
        "or check that its plugin is not disabled)." in result.output
    )
    # Without a hint, click's own error; an installed command is never hinted away.
    assert "No such command 'weather'." in runner.invoke(app, ["weather"]).output
    assert runner.invoke(app, ["hello"]).stdout == "Hello world\n"


def test_discovery_failure_leaves_builtins_working(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(**_: object) -> PluginHost:
        raise RuntimeError("metadata is corrupt")

    monkeypatch.setattr("koboi_cli.host.get_host", explode)
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "run" in result.stdout
    assert "warning: plugin commands are unavailable: RuntimeError: metadata is corrupt" in (
        result.stderr
    )
