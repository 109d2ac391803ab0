"""koboi-agent's top-level ``tracing`` (Langfuse): an alias of ``telemetry``.

Langfuse ingests OTLP traces at ``<base_url>/api/public/otel`` with HTTP Basic auth;
the last test sends a run's spans to a real OTLP receiver answering under that path.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from otel_kit import agent_config
from otlp_receiver import HTTPReceiver

from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi_otel.settings import TelemetrySettings

LANGFUSE = {"provider": "langfuse", "public_key": "pk-lf-1234", "secret_key": "sk-lf-secret-99"}
BASIC = "Basic " + base64.b64encode(b"pk-lf-1234:sk-lf-secret-99").decode()


def _telemetry(tracing: Any, **more: Any) -> TelemetrySettings:
    config = validate_config({"llm": {"provider": "scripted"}, "tracing": tracing, **more})
    section = config.section("telemetry")
    assert isinstance(section, TelemetrySettings)
    return section


def test_langfuse_becomes_an_otlp_exporter_with_basic_auth() -> None:
    section = _telemetry({**LANGFUSE, "base_url": "https://langfuse.example/"})
    assert section.endpoint == "https://langfuse.example/api/public/otel"
    assert section.traces == "otlp" and section.metrics == "none"
    assert section.protocol == "http/protobuf"
    assert {k: v.get_secret_value() for k, v in section.headers.items()} == {"Authorization": BASIC}
    assert "sk-lf-secret-99" not in repr(section) and BASIC not in repr(section)


def test_the_default_base_url_is_koboi_agents_local_langfuse() -> None:
    assert _telemetry(LANGFUSE).endpoint == "http://localhost:3300/api/public/otel"


def test_no_provider_turns_telemetry_off() -> None:
    assert _telemetry({"provider": None}).enabled is False


@pytest.mark.parametrize(
    ("tracing", "message"),
    [
        ({"provider": "datadog"}, "tracing.provider: 'datadog' has no counterpart"),
        ({"provider": "langfuse", "public_key": "pk"}, "tracing.secret_key: is required"),
        ({**LANGFUSE, "flush_interval": 5}, "tracing.flush_interval: has no counterpart"),
        ({**LANGFUSE, "base_url": "langfuse:3000"}, "is not an http(s) URL"),
    ],
)
def test_what_has_no_counterpart_is_one_line_saying_what_to_write(
    tracing: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _telemetry(tracing)
    problems = [p for p in info.value.problems if p.path == "tracing"]
    assert problems and message in problems[0].message, info.value.problems
    assert "\n" not in problems[0].message


def test_set_both_ways_differently_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.endpoint"):
        _telemetry(LANGFUSE, telemetry={"endpoint": "http://collector:4318"})


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.usefixtures("fresh_pipelines")
async def test_a_run_reaches_langfuses_otlp_path_with_the_keys() -> None:
    from koboi import KoboiAgent
    from koboi_otel.exporting import shutdown_all

    with HTTPReceiver(prefix="/api/public/otel") as receiver:
        config = agent_config(None)
        config["tracing"] = {**LANGFUSE, "base_url": receiver.endpoint}
        async with KoboiAgent.from_dict(config) as agent:
            await agent.run("what is 6 * 7")
        shutdown_all()
        receiver.received.wait_for(
            lambda r: any(s.name.startswith("invoke_agent") for s in r.spans)
        )
    assert set(receiver.received.authorizations) == {BASIC}
    assert not receiver.received.metrics  # Langfuse takes traces only


def test_validate_suggest_prints_telemetry_with_the_keys_masked(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(
        "llm: {provider: scripted}\n"
        "tracing:\n"
        "  provider: langfuse\n"
        "  public_key: ${LANGFUSE_PUBLIC_KEY}\n"
        "  secret_key: ${LANGFUSE_SECRET_KEY}\n"
        "  base_url: https://langfuse.example\n",
        encoding="utf-8",
    )
    env = {**os.environ, "LANGFUSE_PUBLIC_KEY": "pk-lf-1234", "LANGFUSE_SECRET_KEY": "sk-lf-9x7Qz"}
    done = subprocess.run(
        [sys.executable, "-m", "koboi", "validate", "agent.yaml", "--suggest"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "suggest: tracing: is accepted; koboi's own spelling is:" in done.stdout
    assert "endpoint: https://langfuse.example/api/public/otel" in done.stdout
    assert "Authorization: Basic ***" in done.stdout
    secret = base64.b64encode(b"pk-lf-1234:sk-lf-9x7Qz").decode()
    assert "sk-lf-9x7Qz" not in done.stdout + done.stderr and secret not in done.stdout
