"""``koboi tokens count``: a text's tokens as an agent's model counts them, and its window."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from koboi_cli.api import CliError, ConfigArgument, JsonOption, get_host, print_json, write

app = typer.Typer(
    help="Count tokens as an agent's model does.", no_args_is_help=True, rich_markup_mode=None
)


@app.callback()
def tokens() -> None:
    """Count tokens as an agent's model does."""  # a group: `koboi tokens count ...`


@app.command("count")
def count(
    config: ConfigArgument,
    text: Annotated[str | None, typer.Argument(help="The text to count.")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Count this file's text instead.")
    ] = None,
    tokenizer: Annotated[
        str, typer.Option(help="auto (the model decides), heuristic or <encoding>.")
    ] = "auto",
    as_json: JsonOption = False,
) -> None:
    """Count TEXT (or --file) with the tokenizer of CONFIG's model."""
    from koboi.config import load_config
    from koboi.errors import KoboiError
    from koboi.models import build_model
    from koboi_tokens.counters import counter_for_config

    if (text is None) == (file is None):
        raise CliError("give the text to count, or --file PATH (one of them)")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {file}: {exc}") from None
    assert text is not None
    host = get_host()
    loaded = load_config(config, host.catalog())
    counter = counter_for_config(loaded, tokenizer)
    try:
        window = build_model(loaded, host.catalog(), None, mode="live").context_window()
    except KoboiError:
        window = loaded.llm.context_window
    tokens = counter.count(text)
    if as_json:
        print_json(
            {
                "tokens": tokens,
                "tokenizer": counter.name,
                "exact": counter.exact,
                "context_window": window,
            }
        )
        return
    exactness = "exact" if counter.exact else "estimate"
    shown = f"{window:,}" if window is not None else "unknown (set llm.context_window)"
    write(sys.stdout, f"{tokens:,} tokens ({counter.name}, {exactness}); context window {shown}\n")
