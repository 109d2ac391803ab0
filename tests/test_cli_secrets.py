"""Issue: a secret reached the terminal. Everything `koboi run` prints goes through the
same redaction as the journal: the `--yes` warning, the tool call and its result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "Zq7-unguessable-literal-9f3k"
CONFIG = """
llm:
  provider: scripted
  rules:
    - match: 'log (?P<x>.+)'
      tool: append_log
      arguments: {line: "{x}"}
      reply: "logged"
tools: {builtin: [append_log]}
store: {url: "memory://"}
"""


def koboi_run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "agent.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    koboi = Path(sys.executable).with_name("koboi")
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [str(koboi), "run", str(config), "-m", f"log the key is {SECRET}", "--yes"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**clean, "KOBOI_DEMO_STEP_SECONDS": "0", **env},
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_the_value_of_an_api_key_variable_never_reaches_the_terminal(tmp_path: Path) -> None:
    done = koboi_run(tmp_path, {"DEMO_API_KEY": SECRET})
    assert done.returncode == 0, done.stderr
    assert "approved append_log (moderate) without asking (--yes)" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "[REDACTED]" in done.stdout and "[REDACTED]" in done.stderr


@pytest.mark.e2e
def test_positive_control_the_same_text_is_shown_when_it_is_no_secret(tmp_path: Path) -> None:
    done = koboi_run(tmp_path, {})
    assert done.returncode == 0, done.stderr
    # Nothing says this string is a secret: it is printed, so the test above can fail.
    assert SECRET in done.stderr and SECRET in done.stdout
