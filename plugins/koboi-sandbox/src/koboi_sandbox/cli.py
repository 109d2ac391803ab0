"""``koboi sandbox check``: which protections this machine can enforce.

Imported only when ``koboi sandbox ...`` runs. With ``--config`` it also says
whether the configured level can be met, and exits non-zero when it cannot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from koboi_sandbox.isolation import SessionIsolation

app = typer.Typer(
    help="What the sandbox can enforce on this machine.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.callback()
def _group() -> None:
    """What the sandbox can enforce on this machine."""


@app.command()
def check(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Agent config whose sandbox level to check (exit 1 if it cannot be met).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the protections this machine offers (seccomp, Landlock ABI, namespaces...),
    whether sessions are isolated from each other at each isolation level and how, and
    whether the configured sandbox level can be met."""
    from koboi_sandbox.isolation import assess
    from koboi_sandbox.options import RestrictedOptions
    from koboi_sandbox.probe import probe

    caps = probe()
    rows = caps.rows()
    levels = {
        level: assess(RestrictedOptions(isolation=level), caps) for level in ("standard", "hard")
    }
    verdict: _Verdict | None = None
    if config is not None:
        verdict = _configured(config)
    if as_json:
        data: dict[str, object] = {
            "protections": [{"name": n, "available": a, "detail": d} for n, a, d in rows],
            "session_isolation": {level: found.as_dict() for level, found in levels.items()},
        }
        if verdict is not None:
            data["configured"] = verdict.level
            data["missing"] = verdict.gaps
            if verdict.sessions is not None:
                data["configured_session_isolation"] = verdict.sessions.as_dict()
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        width = max(len(n) for n, _, _ in rows)
        for name, available, detail in rows:
            mark = "yes" if available else "no "
            typer.echo(f"{name.ljust(width)}  {mark}  {detail}")
        typer.echo("\nsessions isolated from each other (and from the store, the config, koboi):")
        for level, found in levels.items():
            _print_isolation(f"restricted, isolation {level}", found)
        if verdict is not None:
            if verdict.sessions is not None:
                typer.echo("")
                _print_isolation(f"configured ({verdict.level})", verdict.sessions)
            if verdict.gaps:
                typer.echo(f"\nconfigured level ({verdict.level}) CANNOT be met here:")
                for gap in verdict.gaps:
                    typer.echo(f"  - {gap}")
            else:
                typer.echo(f"\nconfigured level ({verdict.level}) can be met here")
    if verdict is not None and verdict.gaps:
        raise typer.Exit(1)


def _print_isolation(label: str, found: SessionIsolation) -> None:
    typer.echo(f"  {label}: {'yes' if found.isolated else 'NO'}")
    for gap in found.gaps:
        typer.echo(f"    ! {gap}")
    for mechanism in found.mechanisms:
        typer.echo(f"    - {mechanism}")
    for note in found.notes:
        typer.echo(f"    note: {note}")


@dataclass(frozen=True)
class _Verdict:
    level: str
    gaps: list[str]
    #: None when the configured backend is not ``restricted``.
    sessions: SessionIsolation | None


def _configured(path: Path) -> _Verdict:
    """The level, what is missing, and the sessions' isolation of the config at ``path``."""
    from koboi.config import load_config
    from koboi_sandbox.options import RestrictedOptions

    try:
        from koboi_cli.api import get_host

        catalog = get_host().catalog()
    except ImportError:  # used without koboi-cli (tests, embedding)
        from koboi.plugins import default_host

        catalog = default_host().catalog()
    agent_config = load_config(path, catalog)
    backend = agent_config.sandbox.backend
    options = agent_config.sandbox_options
    if backend != "restricted" or not isinstance(options, RestrictedOptions):
        return _Verdict(f"backend {backend}", [], None)
    from koboi_sandbox.isolation import assess, uses_landlock, uses_session_ids
    from koboi_sandbox.probe import probe
    from koboi_sandbox.restricted import exposed_files, koboi_paths, required_gaps

    caps = probe()
    exposed: list[str] = []
    if uses_session_ids(options, caps) and not uses_landlock(caps):
        exposed = exposed_files([*koboi_paths(agent_config), *agent_config.base_dir.glob(".env*")])
    network = "deny" if options.network_denied else "allow"
    level = f"restricted, isolation {options.isolation}, network {network}"
    return _Verdict(level, required_gaps(options, caps), assess(options, caps, exposed=exposed))
