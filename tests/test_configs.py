"""The shipped configs validate; a config using uninstalled capabilities says what to install."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from koboi import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

SEED = """\
agent: {name: "my-agent", system_prompt: "You are helpful.", mode: "chat"}
llm: {provider: "openai", model: "gpt-4o-mini", api_key: "${OPENAI_API_KEY}"}
tools: {builtin: [calculator, web_search, memory_store, memory_recall]}
context: {strategy: "smart_truncation", max_context_tokens: 8000}
rag: {enabled: true, retriever: "hybrid", top_k: 10, documents: [{path: "./data/sample/product_catalog.md"}]}
guardrails: {input: {max_length: 10000}, rate_limit: {max_calls_per_minute: 20}}
sandbox: {backend: "restricted"}
"""

# key path in the error -> the distribution the hint must name.
SEED_HINTS = {
    "context": "koboi-context",
    "rag": "koboi-rag",
    "guardrails": "koboi-governance",
    "sandbox.backend": "koboi-sandbox",
    "llm.provider": "koboi-openai",
    "tools.builtin[1]": "koboi-tools-web",
    "tools.builtin[2]": "koboi-memory",
    "tools.builtin[3]": "koboi-memory",
}


def _installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


MISSING = {path: dist for path, dist in SEED_HINTS.items() if not _installed(dist)}

# The provider examples take their keys from the environment, as a user's would.
FAKE_KEYS = {
    "OPENAI_API_KEY": "sk-proj-Xq7fake4Tests9Only2Zk",
    "ANTHROPIC_API_KEY": "sk-ant-api03-Xq7fake4Tests9Only2Zk",
    "CLOUDFLARE_API_TOKEN": "Xq7fake4Tests9Only2ZkLm8Np3Rs6Tu",
    "CLOUDFLARE_ACCOUNT_ID": "0123456789abcdef0123456789abcdef",
    "PEER_KEY": "koboi_Xq7fake4Tests9Only2ZkLm8Np3Rs6Tu",  # a2a_instance_y's key for X
}


def test_there_are_configs() -> None:
    assert CONFIGS, "configs/ holds no *.yaml"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_validates(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for name, value in FAKE_KEYS.items():
        monkeypatch.setenv(name, value)
    config = load_config(path)
    assert config.source == path
    assert config.llm.provider or config.llm.pool


@pytest.fixture
def seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # An empty working directory: no stray .env is read.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "agent.yaml"
    path.write_text(SEED, encoding="utf-8")
    return path


@pytest.mark.skipif(not MISSING, reason="every capability the seed config uses is installed")
def test_seed_config_lists_every_problem_with_install_hints(
    seed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with pytest.raises(ConfigError) as caught:
        load_config(seed)
    error = caught.value
    by_path = {p.path: p for p in error.problems}
    for path, dist in MISSING.items():
        assert path in by_path, f"no problem reported at {path}: {error}"
        assert f"install {dist}" in by_path[path].hint, by_path[path]
    # Capabilities that are installed are not reported.
    for path in SEED_HINTS.keys() - MISSING.keys() - {"guardrails"}:
        assert path not in by_path, by_path[path]
    assert "tools.builtin[0]" not in by_path, "calculator comes from koboi-tools-basic"
    # guardrails live inside the governance section: said so while koboi-governance is not
    # installed (with it, koboi-agent's top-level guardrails is its alias: accepted).
    if "guardrails" in MISSING:
        assert by_path["guardrails"].hint.startswith("write it as 'governance.guardrails'")
    message = str(error)
    assert f"{len(error.problems)} problems in config" in message or len(error.problems) == 1
    for problem in error.problems:
        assert problem.render(str(seed)) in message
    assert str(seed) in message
    assert "sk-test-not-a-real-key" not in message
    assert "Traceback" not in message


def test_seed_config_reports_the_unset_variable_too(seed: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(seed, env={})
    by_path = {p.path: p for p in caught.value.problems}
    assert "llm.api_key" in by_path
    assert "OPENAI_API_KEY" in by_path["llm.api_key"].message
    assert "OPENAI_API_KEY" in by_path["llm.api_key"].hint
    # Reported once, by name: no second "no key" / "placeholder" problem for the same cause.
    assert [p for p in caught.value.problems if p.path.startswith("llm")] == [
        by_path["llm.api_key"]
    ]
    for path in MISSING:
        assert path in by_path


@pytest.mark.e2e
@pytest.mark.skipif(not MISSING, reason="every capability the seed config uses is installed")
def test_koboi_validate_prints_the_problems_without_a_traceback(
    seed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    proc = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "validate", str(seed)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output
    for path, dist in MISSING.items():
        assert path in output
        assert f"install {dist}" in output
    assert "sk-test-not-a-real-key" not in output


@pytest.mark.e2e
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_koboi_validate_accepts_the_config(path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, **FAKE_KEYS},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for value in FAKE_KEYS.values():
        if "fake" in value:
            assert value not in proc.stdout + proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("config", "variable"),
    [("openai.yaml", "OPENAI_API_KEY"), ("anthropic.yaml", "ANTHROPIC_API_KEY")],
)
def test_a_provider_config_without_its_key_names_the_variable(config: str, variable: str) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in FAKE_KEYS and k != "ANTHROPIC_AUTH_TOKEN"
    }
    proc = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "validate", str(ROOT / "configs" / config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=env,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert variable in output
    assert "Traceback" not in output


# -- every offline config runs ------------------------------------------------------


def needs(path: Path) -> list[str]:
    """The variables a config's ``# needs:`` line names (empty: it runs offline)."""
    found = re.search(r"^# needs:(.*)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return found.group(1).split() if found else []


def first_run(path: Path) -> list[str]:
    """The arguments of the first ``koboi run configs/<this file> ...`` line of its header."""
    pattern = rf"^#\s+(?:uv run )?koboi run configs/{re.escape(path.name)}\s(.*)$"
    found = re.search(pattern, path.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, f"{path.name}: no '#   uv run koboi run configs/{path.name} -m ...' line"
    line = found.group(1).split("  #", 1)[0]  # a trailing comment is not an argument
    return ["run", f"configs/{path.name}", *shlex.split(line)]


OFFLINE = [p for p in CONFIGS if not needs(p)]


def test_every_config_is_in_the_index_and_says_how_to_run_it() -> None:
    index = (ROOT / "configs" / "README.md").read_text(encoding="utf-8")
    for path in CONFIGS:
        assert f"`{path.name}`" in index, f"{path.name} is missing from configs/README.md"
        if not needs(path):
            first_run(path)
    for name in re.findall(r"^\| `([\w-]+\.yaml)` \|", index, re.MULTILINE):
        assert (ROOT / "configs" / name).exists(), f"configs/README.md lists {name}: no such file"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What the configs read from a checkout (configs/, data/, the examples they use) in
    a fresh directory that is a git repository, as the working directory."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    shutil.copytree(ROOT / "data", tmp_path / "data")
    for example in ("mcp", "rag_docs"):
        shutil.copytree(ROOT / "examples" / example, tmp_path / "examples" / example)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "data"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "sample data"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    for name in ("KOBOI_STORE", "KOBOI_CACHE_MODE", *FAKE_KEYS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")  # the crash demo's pace
    return tmp_path


#: OpenTelemetry's providers are global to a process and keep the stream they were
#: given: these run in a process of their own.
OWN_PROCESS = {"telemetry_demo.yaml"}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_offline_config_runs_its_first_example(checkout: Path, koboi_command: Any) -> None:
    """The first ``koboi run`` line of every offline config, through the real command
    (in this process: one interpreter for all of them keeps the test fast)."""
    from typer.testing import CliRunner

    from koboi.plugins import reset_default_host
    from koboi_cli.app import app

    failed = []
    for path in OFFLINE:
        args = first_run(path)
        if path.name in OWN_PROCESS:
            done = koboi_command(*args, cwd=checkout)
            code, output = done.returncode, done.stdout + done.stderr
        else:
            reset_default_host()
            result = CliRunner().invoke(app, args)
            code, output = result.exit_code, result.output
        if code != 0:
            failed.append(f"koboi {shlex.join(args)}: exit {code}\n{output}")
    assert not failed, "\n\n".join(failed)
    # Every run went to the one default store of this working directory (the configs
    # that name a store of their own aside).
    sessions = CliRunner().invoke(app, ["sessions", "--json", "--limit", "200"])
    assert sessions.exit_code == 0, sessions.output
    agents = {s["agent"] for s in json.loads(sessions.output)}
    for path in OFFLINE:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        if "store" not in config:
            assert config["agent"]["name"] in agents, path.name
