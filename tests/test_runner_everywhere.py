"""A runner chosen by ``agent.runner`` runs the same everywhere: the real ``koboi run``, a
``koboi serve`` chat (JSON and SSE) and job, and ``koboi run --resume`` after the process
running it was killed in the middle — and ``koboi show`` summarises its plugin events.

The runner is the example plugin's ``briefing`` (docs/plugins/example): the loop once per
city, then every forecast in one answer. The example is not a workspace member; each
process here finds it as any installed plugin, through a ``koboi.plugins`` entry point in
distribution metadata on its path (its wheel, installed into a fresh environment, is
``test_example_plugin.py``'s business).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SRC = ROOT / "docs" / "plugins" / "example" / "src"

CITIES = ["Tokyo", "Paris", "Reykjavik"]
BRIEFING = ["Forecast: Tokyo: 22.5 °C", "Forecast: Paris: 18.0 °C", "Forecast: Reykjavik: 4.0 °C"]

CONFIG = """\
agent:
  name: briefing-e2e
  runner: {name: briefing, cities: [Tokyo, Paris, Reykjavik]}
llm:
  provider: scripted
  rules:
    - match: 'weather in (?P<city>\\w+)'
      tool: weather_forecast
      arguments: {city: "{city}"}
      reply: "Forecast: {result}"
tools:
  builtin: [weather_forecast]
sandbox: {backend: passthrough, workdir: work}
store: {url: "sqlite:///koboi.db"}
server:
  access_log: false
  poll_seconds: 0.1
  job_poll_seconds: 0.1
  keepalive_seconds: 1
  drain_seconds: 1
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of every koboi process here: the example plugin installed (its
    metadata and entry point on the path), strict plugins, nothing from the caller."""
    site = tmp_path_factory.mktemp("site")
    info = site / "koboi_example_weather-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: koboi-example-weather\nVersion: 0.1.0\n"
        "Requires-Dist: koboi-core<0.2,>=0.1\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text(
        "[koboi.plugins]\nweather = koboi_example_weather.plugin\n", encoding="utf-8"
    )
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KOBOI_") and k not in ("PYTHONPATH",)
    }
    environ.update(
        PYTHONPATH=f"{EXAMPLE_SRC}{os.pathsep}{site}",
        KOBOI_STRICT_PLUGINS="1",
        PYTHONDONTWRITEBYTECODE="1",  # nothing written into the docs tree
    )
    return environ


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "briefing.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def koboi(
    env: dict[str, str], cwd: Path, *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        cwd=cwd,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def journal(workdir: Path, ref: str = "last") -> list[Any]:
    from koboi_store_sql.plugin import create_store

    async def read() -> list[Any]:
        async with create_store("sqlite:///koboi.db", workdir) as store:
            info = await store.resolve_session(ref)
            return list(await store.read(info.id))

    return anyio.run(read)


def briefing_events(events: list[Any]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for event in events:
        if event.type.startswith("weather."):
            found.setdefault(event.type, []).append(dict(event.data))
    return found


def test_the_plugin_and_its_runner_are_installed(env: dict[str, str], workdir: Path) -> None:
    shown = koboi(env, workdir, "plugins", "inspect", "weather", "--json")
    assert shown.returncode == 0, shown.stderr
    runners = json.loads(shown.stdout)["registered"]["runners"]
    assert [r["name"] for r in runners] == ["briefing"]


def test_koboi_run_runs_the_briefing_and_koboi_show_summarises_its_events(
    env: dict[str, str], workdir: Path
) -> None:
    done = koboi(env, workdir, "run", "briefing.yaml", "-m", "Morning briefing", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "completed", result
    assert result["output"].splitlines() == BRIEFING
    events = journal(workdir)
    assert events[0].data.get("runner") == "briefing"
    mine = briefing_events(events)
    assert mine["weather.briefing"] == [{"cities": CITIES}]
    assert [e["city"] for e in mine["weather.asked"]] == CITIES
    assert [e["city"] for e in mine["weather.briefed"]] == CITIES

    shown = koboi(env, workdir, "show", "last", "briefing.yaml")
    assert shown.returncode == 0, shown.stderr
    rows = [line.split(None, 3) for line in shown.stdout.splitlines()]
    summaries = {(row[2], row[3]) for row in rows if len(row) == 4}
    # Plugin events, shown with the kernel's, their data summarised as compact JSON.
    assert ("weather.briefing", '{"cities":["Tokyo","Paris","Reykjavik"]}') in summaries
    assert ("weather.asked", '{"city":"Paris"}') in summaries
    assert ("weather.forecast", '{"city":"Paris","celsius":18.0}') in summaries
    assert any(
        kind == "run_continued" and "What is the weather in Paris?" in text
        for kind, text in summaries
    )


def test_a_killed_briefing_resumes_with_the_city_it_was_asking(
    env: dict[str, str], workdir: Path
) -> None:
    # koboi-tools-demo's pause hook holds back the answer of model call 3 (Paris's first)
    # until the process is killed: the journal then says Paris was asked, not answered.
    config = workdir / "briefing.yaml"
    config.write_text(CONFIG.replace("[weather_forecast]", "[weather_forecast, append_log]"))
    marker = workdir / "paused.marker"
    out = (workdir / "run.out").open("w")
    with out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "koboi_cli", "run", "briefing.yaml", "-m", "Morning", "--json"],
            cwd=workdir,
            env={
                **env,
                "KOBOI_DEMO_PAUSE_IN_MODEL_CALL": "3",
                "KOBOI_DEMO_PAUSE_MARKER": str(marker),
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert proc.poll() is None, (workdir / "run.out").read_text()
                assert time.monotonic() < deadline, "the run never reached model call 3"
                time.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    before = briefing_events(journal(workdir))
    assert [e["city"] for e in before["weather.asked"]] == ["Tokyo", "Paris"]
    assert [e["city"] for e in before["weather.briefed"]] == ["Tokyo"]

    done = koboi(env, workdir, "run", "briefing.yaml", "--resume", "last", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "completed", result
    assert result["output"].splitlines() == BRIEFING
    events = journal(workdir)
    after = briefing_events(events)
    assert [e["city"] for e in after["weather.asked"]] == CITIES  # no city asked twice
    assert [e["city"] for e in after["weather.forecast"]] == CITIES  # no tool call twice
    assert [e.type for e in events].count("run_resumed") == 1


# -- koboi serve -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """``koboi serve briefing.yaml`` in a process of its own (one for the chat and the job
    tests), and a client with a key."""
    from koboi_server import KeyRing
    from koboi_store_sql.plugin import create_store

    workdir = tmp_path_factory.mktemp("served")
    (workdir / "briefing.yaml").write_text(CONFIG, encoding="utf-8")

    async def make_key() -> str:
        async with create_store("sqlite:///koboi.db", workdir) as store:
            _, token = await KeyRing(store).create("alice")
            return token

    token = anyio.run(make_key)
    port = free_port()
    log = (workdir / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "serve", "briefing.yaml", "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (workdir / "serve.log").read_text()
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (workdir / "serve.log").read_text()
            time.sleep(0.05)
        with httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            yield client
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure anyway
            proc.kill()
            proc.wait(10)
        log.close()


def test_a_koboi_serve_chat_runs_the_briefing(served: httpx.Client) -> None:
    answered = served.post("/v1/chat", json={"message": "Morning briefing"})
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["outcome"] == "completed" and body["output"].splitlines() == BRIEFING

    # Streamed: the runner's plugin events reach the client as they are committed.
    with served.stream("POST", "/v1/chat/stream", json={"message": "Again"}) as response:
        assert response.status_code == 200
        events = [
            json.loads(line[len("data:") :])
            for line in response.iter_lines()
            if line.startswith("data:")
        ]
    final = events[-1]
    assert final["output"].splitlines() == BRIEFING
    plugin = [e for e in events if e.get("type", "").startswith("weather.")]
    assert [e["data"]["city"] for e in plugin if e["type"] == "weather.briefed"] == CITIES


def test_a_koboi_serve_job_runs_the_briefing(served: httpx.Client) -> None:
    made = served.post("/v1/jobs", json={"input": "Morning briefing"})
    assert made.status_code == 202, made.text
    job_id = made.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        job = served.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("completed", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["status"] == "completed", job
    assert job["result"]["output"].splitlines() == BRIEFING
