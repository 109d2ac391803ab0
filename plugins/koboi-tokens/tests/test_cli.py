"""``koboi tokens count``: the model's tokenizer, its window, errors in one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import koboi_scripted.plugin
import koboi_tokens.plugin
from koboi import PluginHost
from koboi.plugins import use_host
from koboi_cli.app import app


@pytest.fixture(autouse=True)
def host() -> Iterator[PluginHost]:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_tokens.plugin, "tokens", dist="koboi-tokens")
    with use_host(host):
        yield host


def _config(tmp_path: Path, llm: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(f"llm: {llm}\n", encoding="utf-8")
    return path


def test_counts_with_the_models_tokenizer_and_shows_the_window(tmp_path: Path) -> None:
    config = _config(tmp_path, "{provider: scripted, context_window: 4000}")
    shown = CliRunner().invoke(app, ["tokens", "count", str(config), "hello world", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {
        "tokens": 2,
        "tokenizer": "heuristic",
        "exact": False,
        "context_window": 4000,
    }
    exact = CliRunner().invoke(
        app, ["tokens", "count", str(config), "hello world", "--tokenizer", "o200k_base"]
    )
    assert exact.exit_code == 0, exact.output
    assert exact.stdout == "2 tokens (o200k_base, exact); context window 4,000\n"


def test_a_file_and_an_unknown_window(tmp_path: Path) -> None:
    text = tmp_path / "notes.md"
    text.write_text("one two three", encoding="utf-8")
    shown = CliRunner().invoke(
        app, ["tokens", "count", str(_config(tmp_path, "{provider: scripted}")), "-f", str(text)]
    )
    assert shown.exit_code == 0, shown.output
    assert "context window unknown (set llm.context_window)" in shown.stdout


def test_mistakes_are_one_line(tmp_path: Path) -> None:
    config = str(_config(tmp_path, "{provider: scripted}"))
    both = CliRunner().invoke(app, ["tokens", "count", config, "x", "-f", "y"])
    assert both.exit_code == 1
    assert "give the text to count, or --file PATH" in both.output
    bad = CliRunner().invoke(app, ["tokens", "count", config, "x", "--tokenizer", "bert"])
    assert bad.exit_code == 1 and "unknown tokenizer 'bert'" in bad.output
    assert "Traceback" not in bad.output
