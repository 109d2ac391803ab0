"""examples/hitl_client.py against a real server: it streams a chat and answers the approval
typed at its terminal (here: its stdin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "hitl_client.py"

pytestmark = pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from the repository only")


def _run(server: Any, key: str, message: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), message, "--url", server.base_url, "--key", key],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_client_answers_yes_and_the_tool_runs(
    thread_server: Any, make_key: Any, config_path: Path
) -> None:
    server = thread_server()
    done = _run(server, make_key(), "log from-the-client", "y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "append_log" in done.stdout and "needs approval" in done.stdout
    assert "logged: appended from-the-client" in done.stdout
    assert "[completed]" in done.stdout
    assert "reconnecting" not in done.stderr  # one stream, from the message to the final
    log = config_path.parent / "work" / "crash_demo.log"
    assert log.read_text() == "from-the-client\n"


def test_the_client_answers_no_and_the_tool_does_not_run(
    thread_server: Any, make_key: Any, config_path: Path
) -> None:
    server = thread_server()
    done = _run(server, make_key(), "log refused", "n\n")
    assert "refused by approval" in done.stdout
    assert not (config_path.parent / "work" / "crash_demo.log").exists()
