"""Telemetry off imports nothing from OpenTelemetry (in a fresh interpreter); the offline
demo config prints its spans with the console exporter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_PROBE = r"""
import json, sys
import anyio
from koboi import KoboiAgent

config = {
    "agent": {"name": "probe"},
    "llm": {"provider": "scripted", "fallback": "hello"},
    "store": {"url": "memory://"},
}
section = json.loads(sys.argv[1])
if section is not None:
    config["telemetry"] = section

async def main():
    async with KoboiAgent.from_dict(config) as agent:
        result = await agent.run("hi")
    assert result.outcome == "completed", result.error

anyio.run(main)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""


def _otel_modules(section: object, **env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(section)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


@pytest.mark.slow
def test_telemetry_off_imports_nothing_from_opentelemetry() -> None:
    assert _otel_modules(None) == []  # no section
    assert _otel_modules({"enabled": False}) == []
    assert _otel_modules({"traces": "console"}, OTEL_SDK_DISABLED="true") == []
    # The positive control: the same probe with telemetry on does import it.
    assert "opentelemetry.sdk.trace" in _otel_modules({"traces": "none", "metrics": "none"})


@pytest.mark.slow
def test_the_demo_config_prints_its_spans_on_stderr() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "run",
            str(ROOT / "configs" / "telemetry_demo.yaml"),
            "-m",
            "What is 2 + 2?",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "2 + 2 = 4" in done.stdout
    assert '"name": "invoke_agent telemetry-demo"' in done.stderr
    assert '"name": "execute_tool calculator"' in done.stderr
    assert '"gen_ai.client.token.usage"' in done.stderr  # the metrics, at exit
    assert "invoke_agent" not in done.stdout  # the answer stays clean
