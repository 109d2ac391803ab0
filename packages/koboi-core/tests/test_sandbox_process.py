"""The kernel's side of long-lived sandboxed processes: what is released, and when."""

from __future__ import annotations

import os

import pytest

from koboi.errors import SandboxError
from koboi.sandbox import PassthroughSandbox, Sandbox, SandboxProcess, inherited_environment

pytestmark = pytest.mark.anyio


async def test_what_the_sandbox_holds_is_released_even_if_the_process_never_starts() -> None:
    released: list[str] = []

    async def fails() -> object:
        raise SandboxError("cannot start")

    failing = SandboxProcess(fails, on_close=[lambda: released.append("failed start")])  # type: ignore[arg-type]
    with pytest.raises(SandboxError):
        async with failing:
            pass
    never = SandboxProcess(fails, on_close=[lambda: released.append("never entered")])  # type: ignore[arg-type]
    await never.aclose()
    await never.aclose()  # closing twice releases once
    assert released == ["failed start", "never entered"]


async def test_a_started_process_releases_once_after_it_is_killed() -> None:
    released: list[str] = []
    sandbox = PassthroughSandbox()
    process = sandbox.open_process(["sleep", "30"])
    process._on_close.append(lambda: released.append("released"))
    async with process:
        assert process.returncode is None
        pid = process.pid
    await process.aclose()
    assert released == ["released"]
    assert _gone(pid), "the process outlived its close"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is gone
    except FileNotFoundError:
        return True


def test_env_none_drops_what_is_named_like_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_TEST_API_KEY", "s3cr3t")
    monkeypatch.setenv("KOBOI_TEST_COLOUR", "teal")
    inherited = inherited_environment()
    assert "KOBOI_TEST_API_KEY" not in inherited
    assert inherited["KOBOI_TEST_COLOUR"] == "teal"
    assert inherited["PATH"] == os.environ["PATH"]


def test_a_sandbox_does_not_isolate_sessions_unless_it_says_so() -> None:
    assert Sandbox.isolates_sessions.fget is not None  # type: ignore[attr-defined]
    assert PassthroughSandbox().isolates_sessions is False
