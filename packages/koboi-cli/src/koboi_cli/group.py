"""The top-level ``koboi`` group: the error boundary and lazily loaded plugin commands.

Plugins add commands with ``koboi_register_commands``: a name and an import
path ``"package.module:attribute"``. Listing them (``koboi --help``) uses only
the registration: the target module is imported when, and only when, that
command is invoked. A target can be a ``typer.Typer`` app, a click command or
a plain function (wrapped with typer).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

from koboi_cli import errors
from koboi_cli._click import click
from koboi_cli.style import warn

if TYPE_CHECKING:
    from koboi.registry import Registration

PLUGIN_PANEL = "Plugin commands"


class PluginCommandStub(TyperCommand):
    """Stands for a plugin command in listings without importing its target."""

    def __init__(self, registration: Registration[str]) -> None:
        description = registration.description or f"(no description; {registration.target})"
        text = f"{description} [plugin: {registration.plugin}]"
        super().__init__(
            registration.name,
            help=text,
            short_help=text,
            add_help_option=False,
            rich_markup_mode=None,
            rich_help_panel=PLUGIN_PANEL,
        )
        self.registration = registration


class KoboiGroup(TyperGroup):
    """``TyperGroup`` with koboi's error handling and the plugins' commands."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._plugin_commands: dict[str, Registration[str]] | None = None
        self._collisions: list[Registration[str]] = []

    # -- error boundary ------------------------------------------------------

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, typer.Exit, typer.Abort, BrokenPipeError):
            raise  # usage errors, exits and closed pipes: typer handles those
        except Exception as exc:  # the CLI's error boundary: one line, or a traceback with --debug
            debug = bool(ctx.meta.get(errors.DEBUG_KEY)) or errors.debug_from_env()
            raise typer.Exit(errors.report(exc, debug=debug)) from exc

    # -- plugin commands -----------------------------------------------------

    def plugin_commands(self) -> dict[str, Registration[str]]:
        """Plugin commands by name, minus those whose name is a built-in command's."""
        if self._plugin_commands is None:
            self._plugin_commands = {}
            try:
                from koboi_cli import host

                registry = host.get_host(tolerant=True).commands()
            except Exception as exc:  # plugin commands must never break the built-ins
                warn(f"plugin commands are unavailable: {type(exc).__name__}: {exc}")
                return self._plugin_commands
            for entry in sorted(registry, key=lambda e: e.name):
                if entry.name in self.commands:
                    self._collisions.append(entry)
                else:
                    self._plugin_commands[entry.name] = entry
        return self._plugin_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        plugin_names = list(self.plugin_commands())
        # Reported where commands are listed (--help), not on every invocation.
        collisions, self._collisions = self._collisions, []
        for entry in collisions:
            warn(
                f"plugin {entry.plugin!r} registers command {entry.name!r}, which is a "
                "built-in command; the plugin's command is skipped"
            )
        return [*super().list_commands(ctx), *plugin_names]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Built-in commands, then plugin commands in a section of their own."""
        sections: dict[str, list[tuple[str, str]]] = {"Commands": [], PLUGIN_PANEL: []}
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        for name in names:
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            section = PLUGIN_PANEL if isinstance(command, PluginCommandStub) else "Commands"
            sections[section].append((name, command.get_short_help_str(limit)))
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        entry = self.plugin_commands().get(cmd_name)
        return PluginCommandStub(entry) if entry is not None else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name is not None and name not in self.commands:
            entry = self.plugin_commands().get(name)
            if entry is not None:
                return name, load_plugin_command(entry), args[1:]
            if not name.startswith("-"):
                distribution = command_hint(name)
                if distribution is not None:
                    ctx.fail(
                        f"No such command {name!r}: it comes with {distribution} "
                        f"(install {distribution}, or check that its plugin is not disabled)."
                    )
        return super().resolve_command(ctx, args)


def command_hint(name: str) -> str | None:
    """The distribution a ``command`` hint names for ``name``, or None.

    Asked only on the way to a "No such command" error, so the catalog (which
    ``koboi --help`` never collects) is collected only then; whatever goes wrong
    collecting it leaves the plain error.
    """
    try:
        from koboi_cli import host

        return host.get_host(tolerant=True).catalog().hints.distribution("command", name)
    except Exception:  # a hint is a courtesy: click's own error is shown instead
        return None


def load_plugin_command(entry: Registration[str]) -> click.Command:
    """Import a plugin command's target and turn it into a click command."""
    try:
        module_name, _, attribute = entry.target.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
        command = as_command(entry.name, target)
    except Exception as exc:  # a broken plugin command must not break the others
        text = " ".join(str(exc).split())
        raise errors.CliError(
            f"command {entry.name!r} of plugin {entry.plugin!r} could not be loaded from "
            f"{entry.target!r}: {type(exc).__name__}{': ' + text if text else ''}"
        ) from exc
    if not command.help and entry.description:
        command.help = entry.description
    return command


def as_command(name: str, target: object) -> click.Command:
    """A ``typer.Typer``, a click command, or a plain function, as a click command."""
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    elif isinstance(target, click.Command):
        command = target
    elif _is_foreign_click_command(target):
        command = _Passthrough(name, target)
    elif callable(target) and not isinstance(target, type):
        wrapper = typer.Typer(add_completion=False)
        wrapper.command(name=name)(target)
        command = typer.main.get_command(wrapper)
    else:
        raise TypeError(f"{target!r} is not a typer.Typer app, a click command or a function")
    command.name = name
    return command


def _is_foreign_click_command(target: object) -> bool:
    """A command of the click distribution, when typer vendors its own click."""
    module = type(target).__module__
    return (module == "click" or module.startswith("click.")) and callable(
        getattr(target, "main", None)
    )


class _Passthrough(TyperCommand):
    """Hands every argument to a command built on another click."""

    def __init__(self, name: str, target: Any) -> None:
        super().__init__(
            name,
            help=getattr(target, "help", None),
            add_help_option=False,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            rich_markup_mode=None,
        )
        self.target = target

    def invoke(self, ctx: click.Context) -> Any:
        return self.target.main(args=[*ctx.args], prog_name=ctx.command_path, standalone_mode=True)
