"""Fixtures of koboi-eval's tests: eval files written on the fly, and the real CLI."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: An offline agent config: the scripted model answers arithmetic with the real calculator.
CALCULATOR_CONFIG = {
    "agent": {"name": "calc", "max_iterations": 4},
    "llm": {
        "provider": "scripted",
        "rules": [
            {
                "match": r"(?P<expr>\d[\d\s+*/().-]*\d)",
                "tool": "calculator",
                "arguments": {"expression": "{expr}"},
                "reply": "{expr} = {result}",
            }
        ],
        "fallback": "Ask me some arithmetic.",
    },
    "tools": {"builtin": ["calculator"]},
}

WriteEval = Callable[[str, str], Path]
MakeCase = Callable[..., Any]
RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def write_eval(tmp_path: Path) -> WriteEval:
    """``write_eval(name, source)``: an eval file in ``tmp_path`` (source dedented), with
    ``CALCULATOR`` (the config above) defined for it."""

    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        prelude = f"CALCULATOR = {CALCULATOR_CONFIG!r}\n"
        path.write_text(prelude + textwrap.dedent(source), encoding="utf-8")
        return path

    return write


@pytest.fixture
def calculator_config() -> dict[str, Any]:
    """The offline calculator agent's config, as a mapping."""
    return copy.deepcopy(CALCULATOR_CONFIG)


@pytest.fixture
def calc_case(calculator_config: dict[str, Any]) -> MakeCase:
    """``calc_case(*checks, text="What is 2 + 2?", **case_options)``: a case of the
    calculator agent, made in code."""
    from koboi_eval import case

    def make(*checks: Any, text: str = "What is 2 + 2?", **extra: Any) -> Any:
        return case("c", config=calculator_config, input=text, expect=list(checks), **extra)

    return make


@pytest.fixture
def koboi() -> RunCli:
    """``koboi(*args, cwd=...)``: the real ``koboi`` command in a new process."""

    def run(
        *args: str, cwd: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "koboi_cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
            env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
        )

    return run
