"""The plugin as users meet it: the config block, an agent's tools, ``koboi sandbox check``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koboi import KoboiAgent, ToolContext, tool
from koboi.config import validate_config
from koboi.errors import ConfigError, SandboxError
from koboi.store import InMemoryStore
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import Capabilities, probe
from koboi_sandbox.restricted import RestrictedSandbox, required_gaps

pytestmark = pytest.mark.anyio


@tool(risk="destructive")
async def shell(command: str, ctx: ToolContext) -> str:
    """Run a shell command in the session's working directory.

    Args:
        command: The command line.
    """
    result = await ctx.run_process(["sh", "-c", command], timeout=20)
    return f"exit {result.returncode}: {result.stdout}{result.stderr}"


def _config(open_dir: Path, **sandbox: Any) -> dict[str, Any]:
    return {
        "llm": {
            "provider": "scripted",
            "script": [
                {
                    "tool_calls": [
                        {"name": "shell", "arguments": {"command": "pwd; id -u; echo hi > f.txt"}}
                    ]
                },
                "done",
            ],
        },
        "sandbox": {"backend": "restricted", "workdir": str(open_dir / "wd"), **sandbox},
    }


def test_the_whole_block_validates(open_dir: Path) -> None:
    config = validate_config(
        _config(
            open_dir,
            isolation="hard",
            network="deny",
            rlimits={"cpu_seconds": 5, "address_space_mb": 512, "processes": 32},
            path=["/usr/bin", "/bin"],
            env={"LANG": "C.UTF-8"},
            read_only=["/srv/data"],
        )
    )
    options = config.sandbox_options
    assert isinstance(options, RestrictedOptions)
    assert options.isolation == "hard"
    assert options.rlimits.processes == 32
    assert options.network_denied


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({"isolation": "paranoid"}, r"sandbox\.isolation"),
        ({"rlimits": {"cpu": 5}}, r"sandbox\.rlimits\.cpu: unknown key"),
        ({"network": "sometimes"}, r"sandbox\.network"),
        ({"path": ["bin"]}, "absolute"),
        ({"env": {"OPENAI_API_KEY": "x"}}, "OPENAI_API_KEY may not be given"),
        ({"env": {"LD_PRELOAD": "/x.so"}}, "LD_PRELOAD may not be given"),
        ({"workdirr": "x"}, r"sandbox\.workdirr: unknown key"),
    ],
)
def test_mistakes_are_clear_config_errors(
    open_dir: Path, sandbox: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(_config(open_dir, **sandbox))


@pytest.mark.parametrize("isolation", ["standard", pytest.param("hard", marks=pytest.mark.hard)])
async def test_an_agents_tool_runs_confined_in_its_sessions_directory(
    open_dir: Path, isolation: str
) -> None:
    from koboi import AllowAllApprover

    store = InMemoryStore()
    async with KoboiAgent.from_dict(
        _config(open_dir, isolation=isolation),
        extra_tools=[shell],
        approver=AllowAllApprover(),
        store=store,
    ) as agent:
        result = await agent.run("go", session_id="sess-1")
    tool_result = next(m for m in result.messages if m.role == "tool")
    workdir = open_dir / "wd" / "sess-1"
    assert tool_result.content.startswith("exit 0: ")
    where, uid = tool_result.content.removeprefix("exit 0: ").split()
    assert where == str(workdir)
    owner = workdir.stat().st_uid
    assert int(uid) == owner, "the command runs as the owner of its session's workdir"
    if probe().root:  # a uid of the session's own, from the range, not root's or nobody's
        assert RestrictedOptions().session_ids.first <= owner
    assert (workdir / "f.txt").read_text() == "hi\n"


async def test_an_autonomous_agent_may_run_destructive_tools_only_when_restricted(
    open_dir: Path,
) -> None:
    config = _config(open_dir)
    async with KoboiAgent.from_dict(config, extra_tools=[shell], autonomous=True) as agent:
        assert agent.tools  # restricted: it starts (approvals are still needed per call)
    config["sandbox"] = {"backend": "passthrough"}
    with pytest.raises(Exception, match="refused before starting"):
        async with KoboiAgent.from_dict(config, extra_tools=[shell], autonomous=True):
            pass


def test_hard_refuses_to_start_where_a_part_is_missing(open_dir: Path) -> None:
    real = probe()
    without_landlock = Capabilities(
        **{**real.__dict__, "landlock_abi": 0, "landlock_reason": "the kernel has no Landlock"}
    )
    options = RestrictedOptions(workdir=str(open_dir / "wd"), isolation="hard")
    assert "Landlock: the kernel has no Landlock" in required_gaps(options, without_landlock)
    with pytest.raises(SandboxError, match=r"cannot enforce isolation: hard.*Landlock"):
        RestrictedSandbox(options, capabilities=without_landlock)
    without_seccomp = Capabilities(
        **{**real.__dict__, "seccomp": False, "seccomp_reason": "no libseccomp"}
    )
    deny = RestrictedOptions(workdir=str(open_dir / "wd"), network="deny")
    with pytest.raises(SandboxError, match=r"network: deny.*seccomp"):
        RestrictedSandbox(deny, capabilities=without_seccomp)


def _koboi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.e2e
def test_koboi_sandbox_check_prints_what_this_machine_enforces() -> None:
    proc = _koboi("sandbox", "check")
    assert proc.returncode == 0, proc.stderr
    for name in ("seccomp", "Landlock", "PID namespaces"):
        assert name in proc.stdout
    data = json.loads(_koboi("sandbox", "check", "--json").stdout)
    rows = {row["name"]: row for row in data["protections"]}
    assert any("Landlock" in name for name in rows)


#: What the tests of issue 15 need of a machine (every CI machine has it): the kernel
#: features by ``koboi sandbox check``'s names, and the Landlock ABI of its scopes.
NEEDED = ("seccomp filter", "Landlock", "user namespaces", "PID namespaces", "no_new_privs")
NEEDED_LANDLOCK_ABI = 6


@pytest.mark.e2e
def test_the_self_check_finds_everything_the_isolation_tests_need(
    require: Any, open_dir: Path
) -> None:
    """``koboi sandbox check`` is the one judge of what this machine offers: the tests that
    need a feature skip without it here, and under CI this fails instead, naming it."""
    proc = _koboi("sandbox", "check", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    found = {row["name"]: row for row in data["protections"]}
    # One truth: the command says what the sandbox's own probe found.
    assert {name: row["available"] for name, row in found.items()} == {
        name: available for name, available, _ in probe().rows()
    }
    missing = [
        f"{name} ({found[name]['detail']})" for name in NEEDED if not found[name]["available"]
    ]
    abi = probe().landlock_abi
    if abi < NEEDED_LANDLOCK_ABI:
        missing.append(f"Landlock ABI {NEEDED_LANDLOCK_ABI} (this kernel: {abi})")
    require(not missing, "koboi sandbox check: this machine lacks " + "; ".join(missing))
    for level in ("standard", "hard"):
        verdict = data["session_isolation"][level]
        assert verdict["isolated"] and verdict["gaps"] == [], (level, verdict)
    # The same command judges a config: a hard one can be met here (one that cannot is
    # test_koboi_sandbox_check_exits_non_zero_when_the_level_cannot_be_met).
    config = open_dir / "agent.yaml"
    config.write_text(
        "llm: {provider: scripted}\nsandbox: {backend: restricted, isolation: hard}\n"
    )
    met = _koboi("sandbox", "check", "--config", str(config), "--json")
    assert met.returncode == 0 and json.loads(met.stdout)["missing"] == [], met.stdout
    assert json.loads(met.stdout)["configured_session_isolation"]["isolated"] is True


@pytest.mark.e2e
@pytest.mark.hard
def test_koboi_sandbox_check_meets_a_hard_config_here(open_dir: Path) -> None:
    config = open_dir / "agent.yaml"
    config.write_text(
        "llm: {provider: scripted}\nsandbox: {backend: restricted, isolation: hard}\n"
    )
    proc = _koboi("sandbox", "check", "--config", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "can be met" in proc.stdout


@pytest.mark.e2e
@pytest.mark.needs(probe().root, "user: keep is only a gap when koboi runs as root")
def test_koboi_sandbox_check_exits_non_zero_when_the_level_cannot_be_met(open_dir: Path) -> None:
    config = open_dir / "agent.yaml"
    config.write_text(
        "llm: {provider: scripted}\nsandbox: {backend: restricted, isolation: hard, user: keep}\n"
    )
    proc = _koboi("sandbox", "check", "--config", str(config))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CANNOT be met" in proc.stdout
    assert "unprivileged user" in proc.stdout
