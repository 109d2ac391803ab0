"""The ``koboi`` command.

Importing this module must stay cheap (``koboi --help`` runs it): only typer
and koboi-cli's own small modules are imported here. The kernel, the agent
loop and the plugins are imported inside the commands that use them.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from koboi_cli._click import click
from koboi_cli.errors import DEBUG_KEY, debug_from_env
from koboi_cli.group import KoboiGroup
from koboi_cli.style import write

app = typer.Typer(
    name="koboi",
    cls=KoboiGroup,
    help="koboi: AI agents you can leave running unattended.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help formatting imports rich and markdown-it, which
    # costs more than everything else `koboi --help` does.
    rich_markup_mode=None,
)
plugins_app = typer.Typer(
    help="List and inspect the installed plugins.", no_args_is_help=True, rich_markup_mode=None
)
config_app = typer.Typer(help="Config file tools.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(plugins_app, name="plugins")
app.add_typer(config_app, name="config")

ConfigArg = Annotated[
    Path, typer.Argument(metavar="CONFIG", help="The agent's YAML config file.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _set_debug(ctx: typer.Context, debug: bool) -> None:
    if debug or debug_from_env():
        ctx.meta[DEBUG_KEY] = True


def _print_version(value: bool) -> None:
    if not value:
        return
    from koboi_cli.cmd_plugins import version_text

    write(sys.stdout, version_text())
    raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option("--debug", help="Show tracebacks of errors (also KOBOI_DEBUG=1)."),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Show the kernel, CLI and plugin versions and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """koboi: AI agents you can leave running unattended."""
    _set_debug(ctx, debug)


class CacheModeChoice(StrEnum):
    live = "live"
    record = "record"
    replay = "replay"
    cache = "cache"


class ToolsChoice(StrEnum):
    recorded = "recorded"
    live = "live"


@app.command()
def run(
    ctx: typer.Context,
    config: ConfigArg,
    message: Annotated[
        str | None,
        typer.Option("--message", "-m", help="The user message to run (required unless --resume)."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="ID|last",
            help="Finish the interrupted run of this session (full id, unique prefix or last).",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print only one JSON object with the result, at the end."),
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="ID|last",
            help="Continue this session (full id, unique prefix or last); "
            "an id that matches no session starts a new session with that id.",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Approve every tool call that needs approval, without asking."
        ),
    ] = False,
    cache_mode: Annotated[
        CacheModeChoice | None,
        typer.Option(
            "--cache-mode",
            help="Response cache: live (off), record, replay (answers only from the cache, "
            "no key or network needed) or cache; overrides the config's cache.mode.",
        ),
    ] = None,
    replay_mode: Annotated[
        CacheModeChoice | None,
        typer.Option(
            "--replay-mode",
            help="With a bundle (.koboi) and no -m: replay replays the recorded session offline "
            "and compares every event. With a config (or -m): the same as --cache-mode.",
        ),
    ] = None,
    tools: Annotated[
        ToolsChoice | None,
        typer.Option(
            "--tools",
            help="Replaying a bundle: recorded (default) serves tool results from the bundle "
            "and touches nothing; live runs the tools and compares their results.",
        ),
    ] = None,
) -> None:
    """Run an agent on one message, or resume an interrupted run, and stream what it does.

    Tool calls that need approval are asked about at a terminal, denied when
    there is no terminal, and all approved with --yes. Exit code 0 when the run
    completed, 1 otherwise.

    CONFIG may also be a file a plugin runs, such as a bundle (.koboi, from
    koboi-replay): with -m its config runs; a captured run with --replay-mode
    replay is replayed offline and compared, event by event.
    """
    _set_debug(ctx, debug)
    if resume is not None and message is not None:
        raise click.exceptions.UsageError("give either -m/--message or --resume, not both", ctx)
    if resume is not None and session is not None:
        raise click.exceptions.UsageError("--resume names the session itself; drop --session", ctx)
    from koboi_cli.cmd_run import is_run_source
    from koboi_cli.cmd_run import run as run_agent

    if cache_mode is not None and replay_mode is not None and cache_mode.value != replay_mode.value:
        raise click.exceptions.UsageError("give --cache-mode or --replay-mode, not both", ctx)
    source = is_run_source(config)
    if tools is not None and not source:
        raise click.exceptions.UsageError(
            "--tools applies only when replaying a bundle (koboi run RUN.koboi --replay-mode "
            "replay)",
            ctx,
        )
    if resume is None and message is None and not source:
        raise click.exceptions.UsageError(
            "missing -m/--message (or --resume ID|last to finish an interrupted run)", ctx
        )

    code = run_agent(
        config,
        message,
        as_json=as_json,
        session_id=session,
        assume_yes=yes,
        resume=resume,
        cache_mode=cache_mode.value if cache_mode is not None else None,
        replay_mode=replay_mode.value if replay_mode is not None else None,
        tools=tools.value if tools is not None else None,
    )
    raise typer.Exit(code)


class SessionStatusChoice(StrEnum):
    """The statuses a store records (koboi.store.SessionStatus; a test keeps them equal)."""

    created = "created"
    running = "running"
    completed = "completed"
    failed = "failed"
    interrupted = "interrupted"
    cancelled = "cancelled"
    suspended = "suspended"


StoreConfigArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="[CONFIG]",
        help="A config whose store to read (the same as --config).",
        show_default=False,
    ),
]
StoreConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A config whose store to read. Without one: KOBOI_STORE, else the "
        "default store in the working directory (docs/config.md, 'Finding the store').",
        show_default=False,
    ),
]


def _one_config(ctx: typer.Context, positional: Path | None, option: Path | None) -> Path | None:
    if positional is not None and option is not None and positional != option:
        raise click.exceptions.UsageError("give the config once: as CONFIG or with --config", ctx)
    return positional if positional is not None else option


@app.command()
def sessions(
    ctx: typer.Context,
    config: StoreConfigArg = None,
    config_option: StoreConfigOpt = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="Show at most this many sessions.")
    ] = 20,
    status: Annotated[
        SessionStatusChoice | None,
        typer.Option("--status", help="Only sessions with this status.", show_default=False),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The sessions of a store, most recently active first.

    RESUMABLE is yes when the session's last run started and never finished:
    its process died (resume it with koboi run CONFIG --resume ID), or it is
    still running.
    """
    from koboi_cli.cmd_sessions import list_sessions

    list_sessions(
        _one_config(ctx, config, config_option),
        limit=limit,
        status=status.value if status is not None else None,
        as_json=as_json,
    )


@app.command()
def show(
    ctx: typer.Context,
    session: Annotated[
        str,
        typer.Argument(
            metavar="ID|PREFIX|last", help="The session: full id, unique id prefix, or last."
        ),
    ],
    config: StoreConfigArg = None,
    config_option: StoreConfigOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the events as JSON lines (secrets masked).")
    ] = False,
) -> None:
    """The timeline of one session: every journal event, one line each, secrets masked."""
    from koboi_cli.cmd_sessions import show_session

    show_session(session, _one_config(ctx, config, config_option), as_json=as_json)


@app.command()
def call(
    ctx: typer.Context,
    config: ConfigArg,
    tool_name: Annotated[str, typer.Argument(metavar="TOOL", help="The tool's exact name.")],
    arguments: Annotated[
        str,
        typer.Option("--args", "-a", metavar="JSON", help="The call's arguments, a JSON object."),
    ] = "{}",
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="ID",
            help="Journal the call in this session (default: a new one).",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Approve the call if it needs approval.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run one tool call through the agent's whole pipeline, without a model.

    Mode, policy, guardrails, trust, approval (asked at a terminal, denied without
    one, given with --yes), rate limits, the sandbox, the journal and the audit trail
    apply exactly as to a call the model makes. Exit code 0 when the tool ran and
    returned no error.
    """
    from koboi_cli.cmd_call import call_tool

    raise typer.Exit(
        call_tool(config, tool_name, arguments, session_id=session, assume_yes=yes, as_json=as_json)
    )


@app.command()
def validate(
    config: ConfigArg,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Also print koboi's preferred spelling of each section written in "
            "another one (koboi-agent's top-level guardrails, rate_limit, policy...).",
        ),
    ] = False,
) -> None:
    """Check a config file; list every problem found."""
    from koboi_cli.cmd_config import validate as validate_config

    validate_config(config, suggest=suggest)


@plugins_app.command("list")
def plugins_list(
    as_json: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Also collect the hooks plugins define for each other (registration hooks "
            "always run, so a plugin whose registration fails shows as failed).",
        ),
    ] = False,
) -> None:
    """Every plugin found: id, distribution, version, status and why."""
    from koboi_cli.cmd_plugins import list_plugins

    list_plugins(as_json=as_json, check=check)


@plugins_app.command("inspect")
def plugins_inspect(
    plugin_id: Annotated[str, typer.Argument(metavar="ID", help="The plugin id.")],
    as_json: JsonOpt = False,
) -> None:
    """One plugin in detail: status, hooks, load time and what it registered."""
    from koboi_cli.cmd_plugins import inspect_plugin

    inspect_plugin(plugin_id, as_json=as_json)


@config_app.command("schema")
def config_schema(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the schema to this file instead of stdout."),
    ] = None,
) -> None:
    """The JSON schema of a config file, for the kernel and every installed plugin."""
    from koboi_cli.cmd_config import schema

    schema(output)


def _undumpable() -> None:
    """Make this process non-dumpable (Linux): a tool running as the same user cannot
    read koboi's memory or environment (API keys) through /proc or attach with ptrace."""
    if not sys.platform.startswith("linux"):
        return
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def main() -> None:
    """Entry point of the ``koboi`` script."""
    _undumpable()
    app(prog_name="koboi")
