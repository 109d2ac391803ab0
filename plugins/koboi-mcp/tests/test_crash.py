"""SIGKILL during an MCP tool call, then resume: the call is reported in doubt, not repeated.

Real processes: ``koboi run`` (killed with SIGKILL while the MCP server works on
a non-idempotent call), then ``koboi run --resume``. What the server really ran
is read from its own log, so "not repeated" is checked where the effect is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _koboi(*args: str, cwd: Path) -> list[str]:
    return [sys.executable, "-m", "koboi_cli", *args]


def _config(tmp_path: Path, kit: Any, *, idempotent: bool) -> Path:
    server = kit.notes_server(tmp_path)
    server["env"]["PID_FILE"] = str(tmp_path / "server.pid")
    server["env"]["RELEASE_FILE"] = str(tmp_path / "release")
    if idempotent:
        server["idempotent"] = {"slow_write": True}
    config = kit.agent_config(
        tmp_path,
        {"notes": server},
        store=f"sqlite:///{tmp_path / 'koboi.db'}",
        agent={"name": "crash-mcp"},
    )
    config["llm"] = {
        "provider": "scripted",
        "rules": [
            {
                "match": r"write (?P<text>\w+)",
                "tool": "notes__slow_write",
                "arguments": {"text": "{text}", "seconds": 30},
                "reply": "{result}",
            }
        ],
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _kill_mid_call(tmp_path: Path, kit: Any, config: Path) -> str:
    """Run, wait until the server works on the call, SIGKILL koboi (and the orphaned
    server, whose work would otherwise land later); the session id."""
    env = {**os.environ, "KOBOI_STRICT_PLUGINS": "1"}
    run = subprocess.Popen(
        _koboi("run", str(config), "-m", "write hello", "--yes", "--json", cwd=tmp_path),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while "slow_write:start" not in kit.calls(tmp_path):
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the server never got the call"
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGKILL)
    run.communicate()
    server_pid = int((tmp_path / "server.pid").read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(server_pid, signal.SIGKILL)
    return "last"


def _resume(tmp_path: Path, config: Path, session: str) -> tuple[dict[str, Any], list[Any]]:
    env = {**os.environ, "KOBOI_STRICT_PLUGINS": "1"}
    resumed = subprocess.run(
        _koboi("run", str(config), "--resume", session, "--yes", "--json", cwd=tmp_path),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    shown = subprocess.run(
        _koboi("show", session, "--config", str(config), "--json", cwd=tmp_path),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    events = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return json.loads(resumed.stdout or "{}"), events


def test_a_killed_mcp_call_is_in_doubt_after_resume_and_not_repeated(
    tmp_path: Path, kit: Any
) -> None:
    config = _config(tmp_path, kit, idempotent=False)
    session = _kill_mid_call(tmp_path, kit, config)
    result, events = _resume(tmp_path, config, session)
    types = [e["type"] for e in events]
    assert "tool_call_interrupted" in types, types
    interrupted = next(e for e in events if e["type"] == "tool_call_interrupted")
    assert interrupted["data"]["name"] == "notes__slow_write"
    # Not repeated: the server saw the call once (the killed one), never a second time.
    assert kit.calls(tmp_path).count("slow_write:start") == 1
    assert result.get("outcome") == "completed", result


def test_control_an_idempotent_mcp_call_is_run_again_after_resume(tmp_path: Path, kit: Any) -> None:
    config = _config(tmp_path, kit, idempotent=True)
    session = _kill_mid_call(tmp_path, kit, config)
    (tmp_path / "release").touch()  # the call run again finishes at once
    result, events = _resume(tmp_path, config, session)
    types = [e["type"] for e in events]
    assert "tool_call_interrupted" not in types
    assert kit.calls(tmp_path).count("slow_write:start") == 2
    assert result.get("outcome") == "completed", result
