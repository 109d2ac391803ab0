"""``koboi call CONFIG TOOL --args JSON``: one tool call through the whole pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from koboi_cli.app import app

WriteConfig = Callable[[str], Path]

# calculator is safe; approval_risk: safe makes it need approval, as a moderate tool would.
GUARDED = """
    agent: {name: guarded, approval_risk: safe}
    llm: {provider: scripted}
    tools: {builtin: [calculator]}
    store: {url: "memory://"}
"""
OPEN = """
    llm: {provider: scripted}
    tools: {builtin: [calculator]}
    store: {url: "memory://"}
"""


def test_a_call_that_needs_approval_is_denied_without_anyone_to_ask(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    result = runner.invoke(
        app, ["call", str(write_config(GUARDED)), "calculator", "--args", '{"expression": "6*7"}']
    )
    assert result.exit_code == 1
    assert "refused by approval" in result.stdout
    assert "42" not in result.stdout


def test_yes_approves_it_and_json_says_how_it_went(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    result = runner.invoke(
        app,
        [
            "call",
            str(write_config(GUARDED)),
            "calculator",
            "-a",
            '{"expression": "6*7"}',
            "-y",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outcome"] == "completed" and data["content"] == "42" and data["refused_by"] is None
    assert data["call_id"].startswith("direct_")


def test_a_call_the_pipeline_refuses_exits_non_zero(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    config = str(write_config(OPEN))
    unknown = runner.invoke(app, ["call", config, "calculater", "--args", "{}"])
    assert unknown.exit_code == 1 and "refused by lookup" in unknown.stdout
    bad = runner.invoke(app, ["call", config, "calculator", "--args", '{"expr": 1}'])
    assert bad.exit_code == 1 and "refused by arguments" in bad.stdout


def test_arguments_that_are_not_a_json_object_are_a_clear_error(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    config = str(write_config(OPEN))
    for text, message in (
        ("{nope", "--args is not valid JSON"),
        ("[1, 2]", "--args must be a JSON object, not list"),
        ('{"a": 1, "a": 2}', "names the key 'a' more than once"),
    ):
        result = runner.invoke(app, ["call", config, "calculator", "--args", text])
        assert result.exit_code == 1
        assert message in result.stderr and "Traceback" not in result.output
