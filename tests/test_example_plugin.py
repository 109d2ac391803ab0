"""The example plugin in docs/plugins/example is a real, separate distribution.

Builds its wheel, installs it into a fresh virtual environment next to the
local kernel, CLI and default plugins (given explicitly, so nothing named
koboi-* comes from a registry), and checks that the installed ``koboi``
command discovers it, validates a config that uses it and runs an agent that
calls its tool. Its own test suite is run there too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "plugins" / "example"
LOCAL_MEMBERS = (
    "packages/koboi-core",
    "packages/koboi-cli",
    "packages/koboi-testing",
    "plugins/koboi-scripted",
    "plugins/koboi-tools-basic",
)

CONFIG = """\
agent:
  name: weather-e2e
  max_iterations: 4
llm:
  provider: scripted
  # First model call: call the tool; second: report its result.
  rules:
    - match: 'weather in (?P<city>\\w+)'
      tool: weather_forecast
      arguments: {city: "{city}"}
      reply: "Forecast: {result}"
tools:
  builtin: [weather_forecast]
weather:
  units: imperial
  stations: {Paris: 21.5}
"""
# 21.5 degrees C in the config, reported in imperial units by the tool.
EXPECTED_RESULT = "Paris: 70.7 °F"
EXPECTED_OUTPUT = f"Forecast: {EXPECTED_RESULT}"


class Venv:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.python = root / "bin" / "python"
        self.koboi = root / "bin" / "koboi"

    def run(
        self, argv: Sequence[str | Path], *, cwd: Path, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _checked(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, (
        f"{' '.join(proc.args)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KOBOI_", "PYTHON"))
        and k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "UV_PYTHON")
    }
    env.update(UV_PYTHON_DOWNLOADS="never", **extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    base = tmp_path_factory.mktemp("example-plugin")
    build_env = _clean_env()
    outside = Venv(base / "venv", build_env)
    _checked(outside.run([uv, "venv", "--python", sys.executable, outside.root], cwd=base))
    # Build the wheel first: installing it (not the source tree, not editable)
    # proves the example is a complete distribution on its own.
    dist = base / "dist"
    _checked(
        outside.run([uv, "build", "--wheel", "--out-dir", dist, EXAMPLE], cwd=base, timeout=180)
    )
    (wheel,) = dist.glob("koboi_example_weather-*.whl")
    editable = [arg for member in LOCAL_MEMBERS for arg in ("-e", ROOT / member)]
    _checked(
        outside.run(
            [
                uv,
                "pip",
                "install",
                "--python",
                outside.python,
                *editable,
                wheel,
                "pytest>=8.3",
                "anyio>=4.4",
            ],
            cwd=base,
            timeout=180,
        )
    )
    return Venv(outside.root, _clean_env(KOBOI_STRICT_PLUGINS="1"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "cfg.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def test_the_example_is_not_a_workspace_member() -> None:
    root = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'members = ["packages/*", "plugins/*"]' in root
    assert not (ROOT / "uv.lock").exists() or "koboi-example-weather" not in (
        ROOT / "uv.lock"
    ).read_text(encoding="utf-8")


def test_the_example_is_installed_from_its_wheel(venv: Venv, tmp_path: Path) -> None:
    code = "import koboi_example_weather as w; print(w.__file__)"
    location = Path(_checked(venv.run([venv.python, "-c", code], cwd=tmp_path)).stdout.strip())
    assert location.is_relative_to(venv.root), f"imported from {location}, not from the install"


def test_plugins_list_shows_weather_loaded(venv: Venv, tmp_path: Path) -> None:
    text = _checked(venv.run([venv.koboi, "plugins", "list"], cwd=tmp_path)).stdout
    line = next((ln for ln in text.splitlines() if "weather" in ln.split()), None)
    assert line is not None, text
    assert "koboi-example-weather" in line
    assert "loaded" in line

    raw = _checked(venv.run([venv.koboi, "plugins", "list", "--json"], cwd=tmp_path)).stdout
    entry = next((p for p in json.loads(raw) if p["id"] == "weather"), None)
    assert entry is not None, raw
    assert entry["dist"] == "koboi-example-weather"
    assert entry["status"] == "loaded"
    assert not entry["builtin"]


def test_validate_accepts_a_config_using_the_plugin(venv: Venv, workdir: Path) -> None:
    proc = _checked(venv.run([venv.koboi, "validate", "cfg.yaml"], cwd=workdir))
    assert "Traceback" not in proc.stdout + proc.stderr


def test_validate_reports_a_bad_weather_key(venv: Venv, workdir: Path) -> None:
    (workdir / "bad.yaml").write_text(CONFIG.replace("units:", "unit:"), encoding="utf-8")
    proc = venv.run([venv.koboi, "validate", "bad.yaml"], cwd=workdir)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "weather.unit" in output
    assert "units" in output
    assert "Traceback" not in output


def test_run_calls_the_plugin_tool(venv: Venv, workdir: Path) -> None:
    proc = _checked(
        venv.run([venv.koboi, "run", "cfg.yaml", "-m", "weather in Paris", "--json"], cwd=workdir)
    )
    result = json.loads(proc.stdout)
    assert {"session_id", "outcome", "output", "usage", "steps", "error"} <= set(result)
    assert result["outcome"] == "completed", result
    assert result["output"] == EXPECTED_OUTPUT
    assert result["steps"] == 2
    assert result["error"] is None


LIBRARY_RUN = """
import json, anyio
from koboi import KoboiAgent

async def main():
    async with KoboiAgent.from_config("cfg.yaml") as agent:
        result = await agent.run("weather in Paris")
        events = await agent.store.read(result.session_id)
    print(json.dumps({
        "outcome": result.outcome,
        "output": result.output,
        "tool_results": [e.data["content"] for e in events if e.type == "tool_call_finished"],
        "errors": [e.data["is_error"] for e in events if e.type == "tool_call_finished"],
        "plugin_events": [[e.type, e.data] for e in events if "." in e.type],
    }))

anyio.run(main)
"""


def _library_run(venv: Venv, workdir: Path) -> dict[str, Any]:
    proc = _checked(venv.run([venv.python, "-c", LIBRARY_RUN], cwd=workdir))
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_library_run_journals_the_tool_result(venv: Venv, workdir: Path) -> None:
    result = _library_run(venv, workdir)
    assert result["outcome"] == "completed"
    assert result["output"] == EXPECTED_OUTPUT
    assert result["tool_results"] == [EXPECTED_RESULT]
    assert result["errors"] == [False]
    # The plugin's own event, journaled with the call.
    assert result["plugin_events"] == [["weather.forecast", {"city": "Paris", "celsius": 21.5}]]


def test_inspect_shows_the_hook_the_plugin_defines_and_its_toolset(
    venv: Venv, tmp_path: Path
) -> None:
    raw = _checked(venv.run([venv.koboi, "plugins", "inspect", "weather", "--json"], cwd=tmp_path))
    data = json.loads(raw.stdout)
    assert data["defines"] == ["koboi_weather_register_stations"]
    assert "koboi_weather_register_stations" in data["implements"]
    assert [t["name"] for t in data["registered"]["toolsets"]] == ["weather_stations"]
    # What it registers through its own hook is shown too, under the hook's name.
    stations = data["registered"]["koboi_weather_register_stations"]
    assert sorted(s["name"] for s in stations) == ["Paris", "Reykjavik", "Tokyo"]


def test_the_plugin_keeps_koboi_help_cheap(venv: Venv, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from koboi.plugins import PluginHost\n"
        "host = PluginHost(); host.load(); host.commands()\n"
        "print(','.join(m for m in ('pydantic', 'koboi_example_weather.config') if m in sys.modules))"
    )
    shown = _checked(venv.run([venv.python, "-c", code], cwd=tmp_path)).stdout.strip()
    assert shown == "", f"collecting commands imported {shown}"


def test_the_example_test_suite_passes(venv: Venv) -> None:
    # No cache or bytecode left behind in the docs tree.
    env = {**venv.env, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = Venv(venv.root, env).run(
        [venv.python, "-m", "pytest", EXAMPLE / "tests", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
