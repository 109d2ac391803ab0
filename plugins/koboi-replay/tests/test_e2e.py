"""The proofs, with real ``koboi`` processes: a session that used tools, and a session
SIGKILLed twice and resumed, are captured and replayed offline in a fresh directory with
an empty environment — no API key, no network, no store: ``replay: identical``; a copy
with one tool result changed (checksum fixed) diverges at that event."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from koboi_replay import bundle as B

pytestmark = pytest.mark.e2e

TOOLS = """
    agent: {name: e2e-replay, mode: act, approval_risk: safe}
    llm:
      provider: scripted
      on_exhausted: error
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "6 * 7"}}]
        - tool_calls:
            - {name: calculator, arguments: {expression: "42 / 2"}}
            - {name: current_time, arguments: {}}
        - reply: "6 * 7 = 42, and half of it is 21."
    tools: {builtin: [calculator, current_time]}
    store: {url: "sqlite:///.koboi/koboi.db"}
"""

# Four steps of a non-idempotent tool (koboi-tools-demo): a kill between its "started"
# and its effect leaves the call in doubt, and a kill during a model call leaves the
# call to be asked again.
CRASH = """
    agent: {name: e2e-crash, mode: act, on_interrupted_tool: tell_model}
    llm:
      provider: scripted
      on_exhausted: error
      script:
        - tool_calls: [{name: append_log, arguments: {line: step-1}}]
        - tool_calls: [{name: append_log, arguments: {line: step-2}}]
        - tool_calls: [{name: append_log, arguments: {line: step-3}}]
        - tool_calls: [{name: append_log, arguments: {line: step-4}}]
        - reply: "Wrote the lines."
    tools: {builtin: [append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///.koboi/koboi.db"}
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOBOI_DEMO_")}
    env.pop("KOBOI_STORE", None)
    return {**env, "KOBOI_STRICT_PLUGINS": "1", **extra}


def koboi(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        cwd=cwd,
        env=_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _project(tmp_path: Path, text: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return project


def _replay_offline(bundle: Path, tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """``koboi run BUNDLE --replay-mode replay`` in a fresh directory, with no environment."""
    fresh = tmp_path / name
    fresh.mkdir()
    copy = fresh / bundle.name
    shutil.copy(bundle, copy)
    result = koboi("run", copy.name, "--replay-mode", "replay", cwd=fresh, env={})
    # Nothing in the world is touched: no store, no workdir, no log appears.
    assert sorted(p.name for p in fresh.iterdir()) == [copy.name], result.stderr
    return result


@pytest.mark.slow  # a real process: runs in this member's own session
def test_capture_and_replay_offline(tmp_path: Path) -> None:
    project = _project(tmp_path, TOOLS)
    run = koboi("run", "agent.yaml", "-m", "go", "--yes", cwd=project)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("6 * 7 = 42, and half of it is 21.\n")
    captured = koboi("capture", "last", "--config", "agent.yaml", "-o", "run.koboi", cwd=project)
    assert captured.returncode == 0, captured.stderr
    bundle = project / "run.koboi"

    replayed = _replay_offline(bundle, tmp_path, "fresh")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[0] == "replay: identical"
    assert "Traceback" not in replayed.stderr

    # One recorded tool result changed, the checksum fixed: the comparison catches it.
    tampered = B.read_bundle(bundle)
    results = tampered.records(B.TOOL_RESULTS)
    first = next(r for r in results if r["call_id"] == "call_0_0")
    assert first["content"] == "42"
    first["content"] = "43"
    tampered.files[B.TOOL_RESULTS] = B.jsonl(results)
    tampered.seal()
    tampered.write(tmp_path / "tampered.koboi")
    index = next(
        e.seq
        for e in tampered.events()
        if e.type == "tool_call_finished" and e.data["call_id"] == "call_0_0"
    )
    diverged = _replay_offline(tmp_path / "tampered.koboi", tmp_path, "fresh2")
    assert diverged.returncode == 1
    lines = diverged.stdout.splitlines()
    total = len(tampered.events())
    assert lines[0] == f"replay: diverged at event {index} of {total} (tool_call_finished)"
    assert '  expected: "42"' in lines and '  actual:   "43"' in lines


def _wait_for(marker: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text().strip():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {proc.returncode}")
        time.sleep(0.01)
    raise AssertionError(f"no {what} after 30 s")


def _kill_at(project: Path, args: list[str], pause: dict[str, str]) -> str:
    """Start ``koboi run``, wait for a demo hook to pause it, SIGKILL it; return the marker."""
    marker = project / "paused.marker"
    marker.unlink(missing_ok=True)
    env = _env(KOBOI_DEMO_STEP_SECONDS="0", KOBOI_DEMO_PAUSE_MARKER=str(marker), **pause)
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "run", "agent.yaml", *args, "--yes", "--json"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(marker, proc, "the pause")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return marker.read_text().strip()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_crash_resumed_session_replays_identically(tmp_path: Path) -> None:
    project = _project(tmp_path, CRASH)
    # Killed after step-2's "started" was committed, before its line was written...
    assert _kill_at(project, ["-m", "go"], {"KOBOI_DEMO_PAUSE_BEFORE_EFFECT": "step-2"}) == (
        "before step-2"
    )
    # ...then the resumed run is killed during the model call of step 4...
    assert _kill_at(project, ["--resume", "last"], {"KOBOI_DEMO_PAUSE_IN_MODEL_CALL": "4"}) == (
        "model 4"
    )
    # ...and the second resume finishes.
    finished = koboi("run", "agent.yaml", "--resume", "last", "--yes", cwd=project)
    assert finished.returncode == 0, finished.stderr
    log = (project / "work" / "crash_demo.log").read_text().splitlines()
    assert log == ["step-1", "step-3", "step-4"]  # step-2 was in doubt: not run again

    captured = koboi("capture", "last", "--config", "agent.yaml", "-o", "crash.koboi", cwd=project)
    assert captured.returncode == 0, captured.stderr
    bundle = B.read_bundle(project / "crash.koboi")
    types = [e.type for e in bundle.events()]
    assert types.count("run_resumed") == 2 and "tool_call_interrupted" in types
    assert types[-1] == "run_finished"

    replayed = _replay_offline(project / "crash.koboi", tmp_path, "fresh")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[0] == "replay: identical"
    assert "3 runs" in replayed.stdout


def _completion(content: str | None, tool_calls: list[dict[str, object]] | None = None) -> object:
    """A Chat Completions reply, shaped like the API's."""
    from koboi_testing.wire import Reply

    message: dict[str, object] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Reply.json(
        {
            "id": "chatcmpl-replay",
            "object": "chat.completion",
            "created": 1732900000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
    )


@pytest.mark.slow  # a real process: runs in this member's own session
def test_an_http_provider_session_replays_with_no_key_and_no_server(tmp_path: Path) -> None:
    """Recorded through the OpenAI provider against a loopback server with a key; replayed
    with no key in the environment and the server gone."""
    from koboi_testing.wire import WireServer

    key = "sk-replay-TESTKEY0123456789abcdef"
    with WireServer() as server:
        call = {
            "id": "call_abc",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "6 * 7"}'},
        }
        server.push(_completion(None, [call]), _completion("6 * 7 = 42."))
        project = _project(
            tmp_path,
            f"""
            agent: {{name: http-replay, mode: act, stream: false}}
            llm:
              provider: openai
              model: gpt-4o-mini
              base_url: "{server.url}/v1"
              api_key: "${{WIRE_API_KEY}}"
            tools: {{builtin: [calculator]}}
            store: {{url: "sqlite:///.koboi/koboi.db"}}
            """,
        )
        run = koboi("run", "agent.yaml", "-m", "6 * 7?", cwd=project, env=_env(WIRE_API_KEY=key))
        assert run.returncode == 0, run.stderr
        assert run.stdout.endswith("6 * 7 = 42.\n")
        assert [r.headers.get("authorization") for r in server.requests] == [f"Bearer {key}"] * 2
    captured = koboi(
        "capture",
        "last",
        "--config",
        "agent.yaml",
        "-o",
        "run.koboi",
        cwd=project,
        env=_env(WIRE_API_KEY=key),
    )
    assert captured.returncode == 0, captured.stderr
    bundle = B.read_bundle(project / "run.koboi")
    assert "${WIRE_API_KEY}" in bundle.config_text
    assert not any(key.encode() in data for data in bundle.files.values())
    # The provider's cache identity (what the journaled request keys are hashed with) is
    # kept, never the key.
    assert bundle.manifest["model"]["identity"]["model"] == "gpt-4o-mini"
    assert key not in json.dumps(bundle.manifest)

    replayed = _replay_offline(project / "run.koboi", tmp_path, "fresh")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[0] == "replay: identical"
