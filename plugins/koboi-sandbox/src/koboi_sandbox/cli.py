"""``koboi sandbox check``: which protections this machine can enforce.

Imported only when ``koboi sandbox ...`` runs. With ``--config`` it also says
whether the configured level can be met, and exits non-zero when it cannot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

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
    and whether the configured sandbox level can be met."""
    from koboi_sandbox.probe import probe

    caps = probe()
    rows = caps.rows()
    verdict: tuple[str, list[str]] | None = None
    if config is not None:
        verdict = _configured(config)
    if as_json:
        data: dict[str, object] = {
            "protections": [{"name": n, "available": a, "detail": d} for n, a, d in rows],
        }
        if verdict is not None:
            data["configured"] = verdict[0]
            data["missing"] = verdict[1]
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        width = max(len(n) for n, _, _ in rows)
        for name, available, detail in rows:
            mark = "yes" if available else "no "
            typer.echo(f"{name.ljust(width)}  {mark}  {detail}")
        if verdict is not None:
            level, gaps = verdict
            if gaps:
                typer.echo(f"\nconfigured level ({level}) CANNOT be met here:")
                for gap in gaps:
                    typer.echo(f"  - {gap}")
            else:
                typer.echo(f"\nconfigured level ({level}) can be met here")
    if verdict is not None and verdict[1]:
        raise typer.Exit(1)


def _configured(path: Path) -> tuple[str, list[str]]:
    """(level, what is missing) for the sandbox block of the config at ``path``."""
    from koboi.config import load_config
    from koboi_sandbox.options import RestrictedOptions

    try:
        from koboi_cli import host

        catalog = host.get_host().catalog()
    except ImportError:  # used without koboi-cli (tests, embedding)
        from koboi.plugins import default_host

        catalog = default_host().catalog()
    agent_config = load_config(path, catalog)
    backend = agent_config.sandbox.backend
    options = agent_config.sandbox_options
    if backend != "restricted" or not isinstance(options, RestrictedOptions):
        return f"backend {backend}", []
    from koboi_sandbox.probe import probe
    from koboi_sandbox.restricted import required_gaps

    level = f"restricted, isolation {options.isolation}, network {'deny' if options.network_denied else 'allow'}"
    return level, required_gaps(options, probe())
