"""The verdict on sessions' isolation, for every kind of machine (simulated capabilities)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from koboi_sandbox.isolation import assess
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import Capabilities, probe

BASE = Capabilities(
    platform="linux",
    seccomp=True,
    seccomp_reason="ok",
    landlock_abi=7,
    landlock_reason="Landlock ABI 7",
    user_namespaces=True,
    pid_namespaces=True,
    root=True,
    unprivileged_uid=65534,
    unprivileged_gid=65534,
    no_new_privs=True,
)


def caps(**changes: object) -> Capabilities:
    return dataclasses.replace(BASE, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("machine", "isolated", "mentioned"),
    [
        (caps(), True, ["uid/gid of its own", "Landlock (ABI 7)", "PID namespace"]),
        (caps(root=False), True, ["Landlock (ABI 7)"]),
        (caps(landlock_abi=0, landlock_reason="disabled"), True, ["uid/gid of its own"]),
        (caps(root=False, landlock_abi=0, landlock_reason="disabled"), False, ["no Landlock"]),
        (caps(root=False, pid_namespaces=False, landlock_abi=5), False, ["can signal"]),
        (caps(root=False, pid_namespaces=False, landlock_abi=6), True, ["Landlock scopes"]),
        (caps(pid_namespaces=False, landlock_abi=0, landlock_reason="off"), True, []),
    ],
)
def test_the_verdict_follows_the_machine(
    machine: Capabilities, isolated: bool, mentioned: list[str]
) -> None:
    found = assess(RestrictedOptions(), machine)
    assert found.isolated is isolated, found
    text = " ".join([*found.mechanisms, *found.gaps])
    for phrase in mentioned:
        assert phrase in text, (phrase, found)
    assert bool(found.gaps) is not isolated


def test_user_keep_as_root_is_never_isolated() -> None:
    found = assess(RestrictedOptions(user="keep"), caps())
    assert not found.isolated and "user: keep" in found.gaps[0]


def test_readable_files_are_gaps_only_without_landlock() -> None:
    exposed = ["/srv/agent.yaml is readable by every user"]
    assert assess(RestrictedOptions(), caps(), exposed=exposed).isolated
    without = assess(
        RestrictedOptions(), caps(landlock_abi=0, landlock_reason="x"), exposed=exposed
    )
    assert not without.isolated and without.gaps == tuple(exposed)


def test_the_verdict_is_json() -> None:
    json.dumps(assess(RestrictedOptions(), probe()).as_dict())


@pytest.mark.e2e
def test_koboi_sandbox_check_reports_isolation_per_level(open_dir: Path) -> None:
    def koboi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "koboi_cli", "sandbox", "check", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    text = koboi()
    assert text.returncode == 0, text.stderr
    assert "sessions isolated from each other" in text.stdout
    for level in ("standard", "hard"):
        assert f"restricted, isolation {level}: " in text.stdout
    data = json.loads(koboi("--json").stdout)
    here = assess(RestrictedOptions(), probe())
    assert data["session_isolation"]["standard"] == here.as_dict()
    config = open_dir / "agent.yaml"
    config.write_text("llm: {provider: scripted}\nsandbox: {backend: restricted}\n")
    configured = json.loads(koboi("--config", str(config), "--json").stdout)
    assert configured["configured_session_isolation"]["isolated"] is here.isolated
