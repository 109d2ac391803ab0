"""``koboi db``: the schema revision of the SQL store's database.

Imported only when ``koboi db ...`` runs. The database is the one every other
command uses: ``--config``'s ``store.url``, else ``KOBOI_STORE``, else the
default store (``.koboi/koboi.db`` beside the config, or in the working
directory), by the kernel's one rule, :func:`koboi.config.resolve_store_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from koboi.errors import KoboiError

app = typer.Typer(
    help="Show or upgrade the schema revision of the SQL store's database.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Agent config whose store to use (default: KOBOI_STORE, else .koboi/koboi.db).",
        show_default=False,
    ),
]


class NotASQLStore(KoboiError):
    """``koboi db`` was pointed at a store this plugin does not manage."""


def _store_url(config_path: Path | None) -> tuple[str, Path]:
    from koboi.config import load_config, resolve_store, store_scheme

    try:
        from koboi_cli.api import get_host

        catalog = get_host().catalog()
    except ImportError:  # used without koboi-cli (tests, embedding)
        from koboi.plugins import default_host

        catalog = default_host().catalog()
    config = load_config(config_path, catalog) if config_path is not None else None
    url, base_dir = resolve_store(config, catalog)
    if store_scheme(url) not in ("sqlite", "postgresql", "postgres"):
        shown = url.split("?", 1)[0]
        raise NotASQLStore(
            f"the store is {shown}, which koboi db does not manage "
            "(it manages sqlite:/// and postgresql:// stores); set store.url or KOBOI_STORE"
        )
    return url, base_dir


@app.command()
def current(config: ConfigOpt = None) -> None:
    """Print the schema revision of the store's database and the latest this koboi knows."""
    from koboi_store_sql.admin import schema_status

    url, base_dir = _store_url(config)
    status = schema_status(url, base_dir)
    verdict = {
        "missing": "no database yet (it is created on first use, or by 'koboi db upgrade')",
        "current": "up to date",
        "behind": "needs an upgrade: run 'koboi db upgrade' (koboi also upgrades on open)",
        "newer": "written by a newer koboi: upgrade koboi-store-sql; this one will not open it",
    }[status.state]
    typer.echo(f"database: {status.label}")
    typer.echo(f"revision: {status.current or '(none)'}")
    typer.echo(f"latest known: {status.head}")
    typer.echo(f"status: {verdict}")


@app.command()
def upgrade(config: ConfigOpt = None) -> None:
    """Create the store's tables or upgrade them to the latest revision."""
    from koboi_store_sql.admin import upgrade_schema

    url, base_dir = _store_url(config)
    before, after = upgrade_schema(url, base_dir)
    if before.state == "current":
        typer.echo(f"{after.label} is already at revision {after.current}")
    else:
        typer.echo(
            f"upgraded {after.label} from revision {before.current or '(none)'} to {after.current}"
        )
