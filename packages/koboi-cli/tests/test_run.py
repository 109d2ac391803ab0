from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from koboi_cli.app import app

WriteConfig = Callable[[str], Path]

CALCULATOR = """
    agent: {name: calc}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "2 + 2"}}]
        - reply: "It is 4."
    tools: {builtin: [calculator]}
"""

LOOPING = """
    agent: {name: looper, max_iterations: 2}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "1 + 1"}}]
        - tool_calls: [{name: calculator, arguments: {expression: "2 + 2"}}]
    tools: {builtin: [calculator]}
"""

# calculator is a safe tool; approval_risk: safe makes every call need approval.
NEEDS_APPROVAL = """
    agent: {name: guarded, approval_risk: safe}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "6 * 7"}}]
        - reply: "Done."
    tools: {builtin: [calculator]}
"""


def test_plain_output_shows_call_result_and_answer(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    config = write_config(CALCULATOR)
    result = runner.invoke(app, ["run", str(config), "-m", "What is 2 + 2?"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines == ['→ calculator {"expression":"2 + 2"}', "← 4", "It is 4."]
    assert "\x1b[" not in result.output  # not a terminal: no escape codes


def test_json_prints_one_object(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config(CALCULATOR)
    result = runner.invoke(app, ["run", str(config), "-m", "2 + 2?", "--json", "--session", "s1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"session_id", "outcome", "output", "usage", "cost_usd", "steps", "error"}
    assert data["session_id"] == "s1"
    assert data["cost_usd"] == 0.0  # no pricing configured
    assert data["outcome"] == "completed"
    assert data["output"] == "It is 4."
    assert data["steps"] == 2
    assert data["error"] is None
    assert data["usage"]["requests"] == 2


def test_max_iterations_exits_1_with_error_line(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    config = write_config(LOOPING)
    result = runner.invoke(app, ["run", str(config), "-m", "loop"])
    assert result.exit_code == 1
    assert "max_iterations" in result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output

    as_json = runner.invoke(app, ["run", str(config), "-m", "loop", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["outcome"] == "max_iterations"


def test_approval_is_denied_without_a_terminal(
    runner: CliRunner, write_config: WriteConfig
) -> None:
    config = write_config(NEEDS_APPROVAL)
    result = runner.invoke(app, ["run", str(config), "-m", "6 * 7"])
    assert result.exit_code == 0, result.output
    assert "← refused by approval:" in result.stdout
    assert "← 42" not in result.stdout
    assert "--yes" in result.stderr  # the hint says how to approve


def test_yes_approves_and_warns(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config(NEEDS_APPROVAL)
    result = runner.invoke(app, ["run", str(config), "-m", "6 * 7", "--yes"])
    assert result.exit_code == 0, result.output
    assert "← 42" in result.stdout
    assert "warning: approved calculator (safe) without asking (--yes)" in result.stderr


def test_invalid_config_lists_every_problem(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config("""
        agent: {max_iteratons: 3}
        llm: {provider: scriptd}
    """)
    result = runner.invoke(app, ["run", str(config), "-m", "hi"])
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    assert all(line.startswith("error: ") for line in errors)
    assert "Traceback" not in result.output


def test_missing_config_file(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(tmp_path / "nope.yaml"), "-m", "hi"])
    assert result.exit_code == 1
    assert "file not found" in result.stderr


def test_cache_mode_record_then_replay(
    runner: CliRunner, write_config: WriteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("koboi_store_sql", reason="answers are kept in a durable store")
    # Set (empty: no override) so the value --cache-mode writes is undone afterwards.
    monkeypatch.setenv("KOBOI_CACHE_MODE", "")
    monkeypatch.setenv("KOBOI_STORE", f"sqlite:///{tmp_path / 'cache.db'}")
    config = write_config(CALCULATOR)
    recorded = runner.invoke(
        app, ["run", str(config), "-m", "2 + 2?", "--json", "--cache-mode", "record"]
    )
    assert recorded.exit_code == 0, recorded.output
    replayed = runner.invoke(
        app, ["run", str(config), "-m", "2 + 2?", "--json", "--cache-mode", "replay"]
    )
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["output"] == json.loads(recorded.stdout)["output"]
    missed = runner.invoke(app, ["run", str(config), "-m", "3 + 3?", "--cache-mode", "replay"])
    assert missed.exit_code == 1
    assert "no recorded response" in missed.output
    assert "3 + 3?" in missed.output


def test_unknown_cache_mode_is_a_usage_error(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config(CALCULATOR)
    result = runner.invoke(app, ["run", str(config), "-m", "x", "--cache-mode", "sometimes"])
    assert result.exit_code == 2
    assert "sometimes" in result.output
