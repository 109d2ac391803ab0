"""Real processes: ``python -m koboi_cli`` as a user runs it, pipes and terminals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

CONFIG = """
    agent: {name: e2e, approval_risk: safe}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "6 * 7"}}]
        - reply: "The answer is 42."
    tools: {builtin: [calculator]}
"""


def koboi(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(textwrap.dedent(CONFIG), encoding="utf-8")
    return path


def test_run_piped_is_plain_text(config: Path) -> None:
    result = koboi("run", str(config), "-m", "6 * 7", "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stdout == '→ calculator {"expression":"6 * 7"}\n← 42\nThe answer is 42.\n'
    assert "--yes" in result.stderr


def test_run_json(config: Path) -> None:
    result = koboi("run", str(config), "-m", "6 * 7", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["outcome"] == "completed"
    assert data["output"] == "The answer is 42."


def test_help_does_not_import_heavy_modules() -> None:
    code = textwrap.dedent("""
        import sys
        sys.argv = ["koboi", "--help"]
        from koboi_cli.app import main
        try:
            main()
        except SystemExit:
            pass
        heavy = ["httpx", "sqlalchemy", "fastapi", "koboi.agent", "koboi.loop", "rich"]
        print("LOADED", [m for m in heavy if m in sys.modules], file=sys.stderr)
    """)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert "Usage: koboi" in result.stdout
    # koboi.agent/loop come in through koboi/__init__.py, which the kernel owns; the
    # CLI itself must add nothing heavy.
    loaded = result.stderr.split("LOADED", 1)[1]
    for module in ("httpx", "sqlalchemy", "fastapi", "'rich'"):
        assert module not in loaded


def test_importing_the_app_does_not_import_the_kernel() -> None:
    code = (
        "import sys, koboi_cli.app; print(sorted(m for m in sys.modules if m.startswith('koboi')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "'koboi'" not in result.stdout


# -- a real terminal (pseudo-terminal) ------------------------------------------------

pty = pytest.importorskip("pty")


def run_in_terminal(
    args: list[str], answers: bytes = b"", env: dict[str, str] | None = None
) -> str:
    """Run with stdin/stdout/stderr on a pseudo-terminal; feed ``answers``; return the screen."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
        env={**os.environ, "TERM": "xterm", **(env or {})},
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 30
    sent = False
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            screen += chunk
            if answers and not sent and b"approve?" in screen:
                os.write(leader, answers)
                sent = True
        process.wait(timeout=10)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, screen.decode(errors="replace")
    return screen.decode(errors="replace").replace("\r\n", "\n")


def test_terminal_asks_for_approval_and_styles_output(config: Path) -> None:
    screen = run_in_terminal(
        ["run", str(config), "-m", "6 * 7"], answers=b"y\n", env={"NO_COLOR": ""}
    )
    assert "approval needed:" in screen
    assert '{"expression":"6 * 7"}' in screen
    assert "42" in screen
    assert "The answer is 42." in screen
    assert "\x1b[" in screen  # styled on a terminal


def test_no_color_on_a_terminal(config: Path) -> None:
    screen = run_in_terminal(["run", str(config), "-m", "6 * 7", "--yes"], env={"NO_COLOR": "1"})
    assert "The answer is 42." in screen
    assert "\x1b[" not in screen
