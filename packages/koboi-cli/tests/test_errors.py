"""How errors reach the user: one ``error:`` line, a traceback only with --debug."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from koboi.errors import ProviderError
from koboi_cli.app import app

WriteConfig = Callable[[str], Path]


@pytest.fixture
def failing_validate(monkeypatch: pytest.MonkeyPatch) -> Callable[[BaseException], None]:
    def install(exc: BaseException) -> None:
        def validate(config: Path, *, suggest: bool = False) -> None:
            raise exc

        monkeypatch.setattr("koboi_cli.cmd_config.validate", validate)

    return install


def test_koboi_error_is_one_line(
    runner: CliRunner, failing_validate: Callable[[BaseException], None]
) -> None:
    failing_validate(ProviderError("the model said no"))
    result = runner.invoke(app, ["validate", "x.yaml"])
    assert result.exit_code == 1
    assert result.stderr == "error: the model said no\n"


def test_internal_error_hint_without_debug(
    runner: CliRunner, failing_validate: Callable[[BaseException], None]
) -> None:
    failing_validate(RuntimeError("boom\nsecond line"))
    result = runner.invoke(app, ["validate", "x.yaml"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "error: internal error: RuntimeError: boom second line"
    assert "--debug" in lines[1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("how", ["option", "env"])
def test_debug_shows_the_traceback(
    runner: CliRunner,
    failing_validate: Callable[[BaseException], None],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    failing_validate(RuntimeError("boom"))
    args = ["validate", "x.yaml"]
    if how == "option":
        args = ["--debug", *args]
    else:
        monkeypatch.setenv("KOBOI_DEBUG", "1")
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: boom" in result.stderr
    assert result.stderr.rstrip().endswith("error: internal error: RuntimeError: boom")


def test_run_debug_option_shows_traceback_of_a_koboi_error(
    runner: CliRunner, tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.yaml")
    quiet = runner.invoke(app, ["run", missing, "-m", "hi"])
    assert "Traceback" not in quiet.stderr
    loud = runner.invoke(app, ["run", missing, "-m", "hi", "--debug"])
    assert loud.exit_code == 1
    assert "Traceback" in loud.stderr
    assert "ConfigError" in loud.stderr
    assert loud.stderr.rstrip().splitlines()[-1].startswith("error: ")


def test_usage_errors_exit_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["run"])
    assert result.exit_code == 2
    assert "Missing argument" in result.output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_cli_process_makes_itself_non_dumpable() -> None:
    # In a child, so this test process keeps its own setting.
    code = (
        "import ctypes; from koboi_cli.app import _undumpable; libc = ctypes.CDLL(None); "
        "before = libc.prctl(3, 0, 0, 0, 0); _undumpable(); print(before, libc.prctl(3, 0, 0, 0, 0))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.split() == ["1", "0"]  # PR_GET_DUMPABLE: dumpable before, not after
