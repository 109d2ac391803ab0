"""``koboi memory list|search|forget``: what an agent remembers about a user."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer

from koboi_cli.api import (
    CliError,
    ConfigOption,
    JsonOption,
    Style,
    get_host,
    mask_secrets,
    open_store,
    print_json,
    store_target,
    table,
    write,
)

app = typer.Typer(
    help="List, search and forget what an agent remembers.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

OwnerOption = Annotated[
    str | None,
    typer.Option(
        "--owner",
        help="Whose memory: a server principal; default: the config's memory.owner (a local run's).",
    ),
]
T = TypeVar("T")


def _with_memory(
    config_path: Path | None, owner: str | None, work: Callable[[Any, Any], Awaitable[T]]
) -> T:
    from koboi.config import load_config
    from koboi_memory.assembly import memory_for, scope_for

    if config_path is None:
        raise CliError(
            "give the agent's config: --config agent.yaml (its memory section and store)"
        )
    host = get_host()
    config = load_config(config_path, host.catalog())
    if config.section("memory") is None:
        raise CliError(f"{config_path} has no memory section")

    async def run() -> T:
        target = store_target(config_path)
        async with open_store(target) as store:
            memory = await memory_for(config, store, host)
            return await work(memory, scope_for(config, owner))

    return anyio.run(run)


def _rows(facts: list[Any]) -> list[dict[str, Any]]:
    return [
        {"id": f.id, "text": mask_secrets(f.text), "source": f.source, "core": f.core}
        for f in facts
    ]


def _show(rows: list[dict[str, Any]], extra: str | None = None) -> None:
    style = Style(sys.stdout)
    header = ["ID", "SOURCE", "CORE", *([extra.upper()] if extra else []), "FACT"]
    lines = [
        [
            r["id"],
            r["source"],
            "yes" if r["core"] else "",
            *([f"{r[extra]:.3f}"] if extra else []),
            r["text"],
        ]
        for r in rows
    ]
    write(sys.stdout, table(header, lines, style) + "\n" if lines else "nothing remembered\n")


@app.command("list")
def list_(
    config: ConfigOption = None, owner: OwnerOption = None, as_json: JsonOption = False
) -> None:
    """Every fact remembered for a user of the agent, oldest first."""

    async def work(memory: Any, scope: Any) -> list[Any]:
        return list(await memory.facts(scope))

    rows = _rows(_with_memory(config, owner, work))
    print_json(rows) if as_json else _show(rows)


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    config: ConfigOption = None,
    owner: OwnerOption = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100, help="How many facts.")] = 5,
    as_json: JsonOption = False,
) -> None:
    """The facts that best match QUERY, as recall ranks them."""

    async def work(memory: Any, scope: Any) -> list[Any]:
        return list(await memory.search(scope, query, k=top_k))

    hits = _with_memory(config, owner, work)
    rows = [
        {**row, "score": hit.score}
        for row, hit in zip(_rows([h.fact for h in hits]), hits, strict=True)
    ]
    print_json(rows) if as_json else _show(rows, "score")


@app.command("forget")
def forget(
    fact_ids: Annotated[list[str], typer.Argument(help="Ids of the facts (koboi memory list).")],
    config: ConfigOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Forget facts by id. Exit code 1 when one of them was not there."""

    async def work(memory: Any, scope: Any) -> list[str]:
        return list(await memory.forget(scope, fact_ids))

    gone = _with_memory(config, owner, work)
    missing = [i for i in fact_ids if i not in gone]
    if as_json:
        print_json({"forgotten": gone, "missing": missing})
    else:
        for fact in gone:
            write(sys.stdout, f"forgot {fact}\n")
    if missing:
        if not as_json:
            raise CliError(f"no remembered fact has the id {', '.join(missing)} (for this user)")
        raise typer.Exit(1)
