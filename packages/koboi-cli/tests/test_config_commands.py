from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from koboi_cli.app import app

WriteConfig = Callable[[str], Path]


def test_validate_ok(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config("""
        agent: {name: helper}
        llm: {provider: scripted}
        tools: {builtin: [calculator, current_time]}
    """)
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"ok: {config} is valid (agent helper, provider scripted, 2 tools)\n")


def test_validate_lists_every_problem(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config("""
        agent: {name: helper, max_iteratons: 3}
        llm: {provider: scriptd}
        tools: {builtin: [calc]}
        nonsense: {}
    """)
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 4, lines
    assert all(line.startswith(f"error: {config}: ") for line in lines)
    text = result.stderr
    assert "agent.max_iteratons: unknown key (did you mean 'max_iterations'?)" in text
    assert "llm.provider: unknown provider 'scriptd'" in text
    assert "tools.builtin[0]: unknown tool 'calc'" in text
    assert "nonsense: unknown section" in text
    assert "Traceback" not in result.output


def test_validate_invalid_yaml(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config("llm: [unclosed\n")
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "invalid YAML" in result.stderr


def test_config_schema_is_json_with_properties(runner: CliRunner) -> None:
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert {"agent", "llm", "tools", "store", "sandbox"} <= set(schema["properties"])
    assert "calculator" in schema["x-koboi-tools"]
    assert "scripted" in schema["x-koboi-provider-options"]


def test_config_schema_to_file(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    result = runner.invoke(app, ["config", "schema", "--output", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "properties" in json.loads(target.read_text(encoding="utf-8"))
