"""``koboi rag``: ingest a config's documents, search its index, show and forget it.

Every command takes the agent's config first; the index is the one the agent uses
(``rag.index``: by default the config's store database).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from koboi_cli.api import (
    CliError,
    ConfigArgument,
    JsonOption,
    Style,
    get_host,
    mask_strings,
    open_store,
    print_json,
    store_target,
    table,
    write,
)

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi_rag.config import RagSettings
    from koboi_rag.engine import Progress, RagEngine

app = typer.Typer(
    help="Ingest, search, inspect and forget the document index of a config's rag section.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _settings(config: Path) -> tuple[AgentConfig, RagSettings]:
    from koboi.config import load_config

    loaded = load_config(config, get_host().catalog())
    settings = loaded.section("rag")
    if settings is None:
        raise CliError(f"{config} has no rag section; add one (rag: {{documents: [...]}})")
    return loaded, settings  # type: ignore[return-value]


@asynccontextmanager
async def _engine(config: Path) -> AsyncIterator[RagEngine]:
    from koboi_rag.engine import RagEngine

    loaded, settings = _settings(config)
    target = store_target(config)
    if settings.index == "store" and target.is_memory:
        raise CliError(
            f"{config}: the store is {target.shown_url}, which keeps nothing after this command; "
            "set store.url (or KOBOI_STORE) or rag.index to a sqlite:/// or postgresql:// URL"
        )
    async with open_store(target) as store:
        yield RagEngine.for_store(settings, store, host=get_host(), base_dir=loaded.base_dir)


def _shower(as_json: bool) -> Any:
    style = Style(sys.stderr)

    def show(step: Progress) -> None:
        if step.stage == "document":
            write(sys.stderr, f"  indexed  {step.key}: {step.message}\n")
        elif step.stage == "failed":
            write(sys.stderr, style.red(f"  failed   {step.key}: {step.message}") + "\n")
        elif step.stage == "deleted":
            write(sys.stderr, f"  removed  {step.key}: {step.message}\n")
        elif step.stage == "fit":
            write(sys.stderr, f"  {step.message}\n")
        elif step.stage == "embed":
            write(sys.stderr, f"  embedded {step.done}/{step.total} chunks\n")
        elif step.stage == "skipped" and not as_json:
            write(sys.stderr, style.dim(f"  same     {step.key}") + "\n")

    return show


@app.command("ingest")
def ingest(
    config: ConfigArgument,
    refit: Annotated[
        bool, typer.Option("--refit", help="Fit the embedder again and embed every chunk again.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Index CONFIG's rag.documents: new and changed ones, removing deleted ones.

    Resumable: after an interruption, run it again; what was committed is kept.
    Exit code 1 when a document could not be indexed (the others were).
    """

    async def run() -> dict[str, Any]:
        async with _engine(config) as engine:
            report = await engine.ingest(_shower(as_json), refit=refit)
            return {**report.data(), "stats": await engine.stats()}

    result = anyio.run(run)
    if as_json:
        print_json(mask_strings(result))
    else:
        style = Style(sys.stdout)
        write(
            sys.stdout,
            f"{result['added']} added, {result['updated']} updated, {result['unchanged']} "
            f"unchanged, {result['deleted']} removed, {len(result['failed'])} failed; "
            f"{result['chunks']} chunks indexed, {result['embedded']} embedded "
            f"({result['seconds']:.2f} s)\n",
        )
        for note in result["notes"]:
            write(sys.stdout, style.yellow(f"note: {note}") + "\n")
        for failure in result["failed"]:
            write(
                sys.stdout, style.red(f"failed: {failure['document']}: {failure['error']}") + "\n"
            )
    if result["failed"]:
        raise typer.Exit(1)


@app.command("search")
def search(
    config: ConfigArgument,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int | None, typer.Option("--top-k", "-k", min=1, help="Results.")] = None,
    retriever: Annotated[
        str | None, typer.Option("--retriever", help="keyword, bm25, semantic or hybrid.")
    ] = None,
    filter_json: Annotated[
        str | None, typer.Option("--filter", help='A metadata filter as JSON: {"lang": "en"}.')
    ] = None,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct",
            help="Search the index without the agent (no query rewriting, HyDE or LLM reranking).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Search CONFIG's index, as the rag__search tool does.

    With query rewriting, HyDE or the llm reranker configured, the search runs as a
    governed call of rag__search by the agent (its side calls are journaled in a session
    of their own), unless --direct.
    """
    if retriever not in (None, "keyword", "bm25", "semantic", "hybrid"):
        raise CliError(f"--retriever {retriever!r}: use keyword, bm25, semantic or hybrid")
    filter_spec = None
    if filter_json:
        try:
            filter_spec = json.loads(filter_json)
        except ValueError as exc:
            raise CliError(f"--filter is not JSON: {exc}") from None
        from koboi_rag.filters import FilterError, compile_filter

        try:
            compile_filter(filter_spec, "--filter")
        except FilterError as exc:
            raise CliError(str(exc)) from None
    _, settings = _settings(config)
    from koboi_rag.agent import _needs_model

    if _needs_model(settings) and not direct:
        data = anyio.run(_search_through_agent, config, query, top_k, filter_spec)
    else:

        async def run() -> dict[str, Any]:
            async with _engine(config) as engine:
                outcome = await engine.search(
                    query, top_k=top_k, retriever=retriever, filter=filter_spec
                )
                return outcome.data()

        data = anyio.run(run)
    data = mask_strings(data)
    if as_json:
        print_json(data)
        return
    style = Style(sys.stdout)
    if data.get("rewritten"):
        write(sys.stdout, style.dim(f"searched for: {data['rewritten']}") + "\n")
    for note in data.get("notes") or ():
        write(sys.stdout, style.yellow(f"note: {note}") + "\n")
    if not data["results"]:
        write(sys.stdout, "no results\n")
        return
    for item in data["results"]:
        where = (
            f"{item['source']} chunk {item['position']} chars {item['chars'][0]}-{item['chars'][1]}"
        )
        if item.get("heading"):
            where += f" § {item['heading']}"
        if item.get("page") is not None:
            where += f" p. {item['page']}"
        write(
            sys.stdout,
            style.bold(f"[{item['n']}] {where}") + style.dim(f"  score {item['score']:.4f}") + "\n",
        )
        text = " ".join(str(item["text"]).split())
        write(sys.stdout, f"    {text[:300]}{'…' if len(text) > 300 else ''}\n")


async def _search_through_agent(
    config: Path, query: str, top_k: int | None, filter_spec: Any
) -> dict[str, Any]:
    from koboi import KoboiAgent
    from koboi_rag.agent import offered_search_name

    arguments: dict[str, Any] = {"query": query}
    if top_k:
        arguments["top_k"] = top_k
    if filter_spec:
        arguments["filter"] = filter_spec
    async with KoboiAgent.from_config(config) as agent:
        name = offered_search_name(agent.tools)
        if name is None:
            raise CliError(
                f"{config}: rag.tool is false, so the agent has no search tool; use --direct"
            )
        called = await agent.call_tool(name, arguments)
    if not called.ok:
        raise CliError(f"{name} failed: {called.content}")
    return json.loads(called.content)  # type: ignore[no-any-return]


@app.command("stats")
def stats(config: ConfigArgument, as_json: JsonOption = False) -> None:
    """What CONFIG's index holds: documents, chunks, vectors, sizes, analyser, embedder."""

    async def run() -> dict[str, Any]:
        async with _engine(config) as engine:
            return await engine.stats()

    data = anyio.run(run)
    if as_json:
        print_json(data)
        return
    rows = [[key, str(value)] for key, value in data.items()]
    write(sys.stdout, table(["", ""], rows, Style(sys.stdout)))


@app.command("forget")
def forget(
    config: ConfigArgument,
    sources: Annotated[
        list[str] | None,
        typer.Argument(help="rag.documents entries or document keys to remove from the index."),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Remove the whole collection (its documents and vectors).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Remove documents from CONFIG's index: the given sources or documents, or --all."""
    if not sources and not everything:
        raise CliError("name the sources or documents to forget, or pass --all for everything")

    async def run() -> int:
        async with _engine(config) as engine:
            return await engine.forget(() if everything else list(sources or ()))

    removed = anyio.run(run)
    if as_json:
        print_json({"removed": removed})
        return
    write(sys.stdout, f"{removed} documents removed\n")
