"""koboi installs like a library: every distribution builds as a wheel, and a fresh
virtual environment installs ``koboi-agent`` with extras from those wheels alone, then
runs the quickstart with the installed ``koboi`` command (docs/install.md).

No network: the third-party packages come from uv's cache (``uv pip install --offline``
from a ``pylock.toml`` that ``uv export`` writes from uv.lock, so every file is the one
the lock names); the koboi packages come only from the wheels built here
(``--no-index --find-links``), never from an index — where ``koboi-agent`` is another
project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "api,tools,sandbox"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run(*args: str | Path, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    environ.update(UV_PYTHON_DOWNLOADS="never", UV_OFFLINE="1", KOBOI_STRICT_PLUGINS="1", **env)
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.mark.timeout(1800)
def test_a_fresh_venv_installs_koboi_agent_from_the_wheels_and_runs_the_quickstart(
    tmp_path: Path,
) -> None:
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the wheels"
    wheels = tmp_path / "wheelhouse"
    run(uv, "build", "--all-packages", "--wheel", "-o", wheels, "-q")
    members = {
        p.parent.name
        for p in [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")]
    } - {"koboi-embed-minilm"}
    built = {w.name.split("-")[0].replace("_", "-") for w in wheels.glob("*.whl")}
    assert built == members, members ^ built

    lock = tmp_path / "pylock.toml"
    extras = [a for e in EXTRAS.split(",") for a in ("--extra", e)]
    run(
        uv,
        "export",
        "--frozen",
        "--format",
        "pylock.toml",
        "--package",
        "koboi-agent",
        *extras,
        "--no-dev",
        "--no-emit-workspace",
        "-o",
        lock,
        "-q",
    )

    venv = tmp_path / "venv"
    run(uv, "venv", "-q", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    run(uv, "pip", "install", "-q", "--offline", "--python", python, "-r", lock)
    run(
        uv,
        "pip",
        "install",
        "-q",
        "--offline",
        "--no-index",
        "--find-links",
        wheels,
        "--python",
        python,
        f"koboi-agent[{EXTRAS}]",
    )
    installed = run(uv, "pip", "list", "--python", python, "--format", "freeze").stdout
    assert "koboi-agent==0.1.0" in installed and "koboi-server==0.1.0" in installed

    # The quickstart, with the installed command, in a directory holding only configs/.
    project = tmp_path / "project"
    shutil.copytree(ROOT / "configs", project / "configs", ignore=shutil.ignore_patterns(".koboi"))
    koboi = venv / "bin" / "koboi"
    done = run(koboi, "run", "configs/quickstart.yaml", "-m", "What is 2 + 2?", cwd=project)
    assert done.stdout.splitlines()[-1] == "2 + 2 = 4"
    # Durable by default; capture (koboi-replay is in the bare install) right after it.
    run(koboi, "capture", "last", "-o", "run.koboi", cwd=project)
    replayed = run(koboi, "run", "run.koboi", "--replay-mode", "replay", cwd=project)
    assert "replay: identical" in replayed.stdout
    # The installed code, not the checkout's.
    where = run(python, "-c", "import koboi, koboi_server; print(koboi.__file__)", cwd=project)
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout
    version = run(python, "-m", "koboi", "--version", cwd=project).stdout
    assert "koboi-server" in version and "koboi-sandbox" in version
