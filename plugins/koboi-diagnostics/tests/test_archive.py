"""``koboi diagnostics``: the archive says what a bug report needs, and no canary secret
(in the environment, the config, a tool argument in the journal) is anywhere in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import anyio
import pytest
import yaml

from koboi import KoboiAgent, tool
from koboi.store import NewEvent

pytestmark = pytest.mark.slow

ENV_CANARY = "Vq7Lm2Xw9Rt4Kp8Zb3Nc6Hd1Fg5Js0Ay"
SHAPED_CANARY = "ghp_Zq8vN3xK1mT5rW2yB7cD4fH6jL9pQ0sA2uE5"
ARGUMENT_CANARY = "sk-proj-Tz4Qe8Wr2Yu6Io0Pa3Sd7Fg1Hj5Kl9Zx2Cv6Bn"


@tool(idempotent=True)
def note_down(text: str) -> str:
    """Note something down.

    Args:
        text: What to note.
    """
    return "noted"


def _config(tmp_path: Path) -> Path:
    config = {
        "agent": {
            "name": "diag",
            "system_prompt": f"You help. Ref {SHAPED_CANARY}; ${{CANARY_API_KEY}}",
        },
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"^note (?P<text>.+)$",
                    "tool": "note_down",
                    "arguments": {"text": "{text}"},
                    "reply": "done",
                }
            ],
        },
        "store": {"url": f"sqlite:///{tmp_path / 'koboi.db'}"},
        "telemetry": {
            "traces": "none",
            "metrics": "none",
            "headers": {"x-api-key": "${CANARY_API_KEY}"},
        },
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_archive_holds_the_report_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_API_KEY", ENV_CANARY)
    config = _config(tmp_path)

    async def write_a_session() -> str:
        async with KoboiAgent.from_config(config, extra_tools=[note_down]) as agent:
            result = await agent.run(f"note the key is {ARGUMENT_CANARY} for the deploy")
            assert result.outcome == "completed"
            # A tool argument as a journal without redaction keeps it (governance, when
            # installed, masks it before it is stored: this writes it as is).
            started = {
                "step": 1,
                "call_id": "c9",
                "name": "note_down",
                "arguments": {"text": ARGUMENT_CANARY},
                "idempotent": True,
                "decision": [],
            }
            await agent.store.append(result.session_id, [NewEvent("tool_call_started", started)])
            journal = await agent.store.read(result.session_id)
        # The control: the journal does hold the argument's canary.
        assert ARGUMENT_CANARY in json.dumps([dict(e.data) for e in journal])
        return result.session_id

    session_id = anyio.run(write_a_session)
    archive = tmp_path / "report" / "diag.zip"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "diagnostics",
            str(config),
            "-o",
            str(archive),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CANARY_API_KEY": ENV_CANARY, "OTEL_SERVICE_NAME": "diag"},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["archive"] == str(archive)

    with zipfile.ZipFile(archive) as zipped:
        files = {name: zipped.read(name) for name in zipped.namelist()}
    assert set(files) >= {
        "versions.json",
        "config.json",
        "sandbox.json",
        "store.json",
        "sessions.json",
        "environment.json",
        "README.txt",
    }
    everything = b"\n".join(files.values())
    for canary in (ENV_CANARY, SHAPED_CANARY, ARGUMENT_CANARY):
        assert canary.encode() not in everything, canary

    # What a report needs is there.
    versions = json.loads(files["versions.json"])
    ids = {p["id"]: p for p in versions["plugins"]}
    assert ids["diagnostics"]["status"] == "loaded" and ids["telemetry"]["version"]
    assert versions["python"].startswith(sys.version.split()[0])
    config_view = json.loads(files["config.json"])
    assert config_view["agent"]["name"] == "diag"
    assert config_view["agent"]["system_prompt"].startswith("You help. Ref ")
    assert config_view["sections"]["telemetry"]["headers"] == {"x-api-key": "**********"}
    store = json.loads(files["store.json"])
    assert store["schema_revision"] == "0005"
    assert store["statistics"]["rows"]["sessions"] == 1 and store["statistics"]["bytes"] > 0
    (session,) = json.loads(files["sessions.json"])
    assert session["id"] == session_id
    assert session["runs"] == 1 and session["model_calls"] == 2
    assert session["last_run"]["outcome"] == "completed"
    sandbox = json.loads(files["sandbox.json"])
    assert sandbox["describe"]["backend"] == "passthrough"
    environment = json.loads(files["environment.json"])
    assert "OTEL_SERVICE_NAME" in environment["variables_set"]


def test_a_config_that_does_not_validate_still_gets_a_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "agent: {name: x}\nllm: {provider: scripted}\ntelemetry: {traces: carrier-pigeon}\n"
    )
    archive = tmp_path / "bad.zip"
    done = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "diagnostics", str(bad), "-o", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(archive) as zipped:
        config_view = json.loads(zipped.read("config.json"))
    assert "telemetry.traces" in config_view["error"]
