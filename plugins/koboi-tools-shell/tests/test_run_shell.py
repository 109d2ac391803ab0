"""run_shell in the foreground, over real processes, under passthrough and restricted."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.errors import ToolArgumentError, ToolError
from koboi.tools import Risk, ToolContext
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import required_gaps
from koboi_tools_shell.settings import MAX_COMMAND_CHARS, ShellSettings
from koboi_tools_shell.tools import RunShell

pytestmark = pytest.mark.anyio

CAPS = probe()
HARD_GAPS = required_gaps(RestrictedOptions(isolation="hard"), CAPS)
needs_pid_namespace = pytest.mark.skipif(not CAPS.pid_namespaces, reason="no PID namespaces here")
needs_hard = pytest.mark.skipif(bool(HARD_GAPS), reason=f"no isolation hard here: {HARD_GAPS}")

run_shell = RunShell()


def header(content: str) -> dict[str, str]:
    """The ``key: value`` lines before the first section."""
    fields = {}
    for line in content.split("\n"):
        if line.startswith("---"):
            break
        key, _, value = line.partition(": ")
        fields[key] = value
    return fields


def section(content: str, name: str) -> str:
    """The text of the ``--- name ---`` section."""
    after = content.split(f"--- {name} ---\n", 1)[1]
    return after.split("\n--- ", 1)[0]


def test_metadata() -> None:
    assert run_shell.name == "run_shell"
    assert run_shell.risk is Risk.DESTRUCTIVE
    assert run_shell.idempotent is False
    properties = run_shell.spec().parameters["properties"]
    assert set(properties) == {"command", "timeout_seconds", "cwd", "background"}
    assert properties["command"]["maxLength"] == MAX_COMMAND_CHARS


async def test_output_exit_code_and_stderr(make_context: Any, sandbox_kind: str, call: Any) -> None:
    ctx = make_context(sandbox_kind)
    result = await call(run_shell, ctx, command="echo out; echo err >&2; exit 3")
    assert header(result.content) == {"exit_code": "3", "timed_out": "false", "truncated": "false"}
    assert section(result.content, "stdout") == "out"
    assert section(result.content, "stderr") == "err"
    assert not result.is_error
    assert result.data["exit_code"] == 3


async def test_the_format_is_stable(make_context: Any, call: Any) -> None:
    result = await call(run_shell, make_context(), command="printf 'a\\nb\\n'")
    assert result.content == (
        "exit_code: 0\ntimed_out: false\ntruncated: false\n"
        "--- stdout ---\na\nb\n--- stderr ---\n(empty)"
    )


async def test_runs_sh_in_the_sessions_workdir(
    make_context: Any, sandbox_kind: str, call: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    result = await call(run_shell, ctx, command="pwd; echo hi > made.txt")
    assert section(result.content, "stdout") == str(ctx.workdir)
    assert (ctx.workdir / "made.txt").read_text() == "hi\n"


async def test_restricted_runs_as_the_sessions_own_user(make_context: Any, call: Any) -> None:
    ctx, other = make_context("restricted", "s1"), make_context("restricted", "s2")
    assert ctx.workdir is not None and other.workdir is not None
    result = await call(run_shell, ctx, command="id -u; id -g")
    uid, gid = section(result.content, "stdout").split("\n")
    owner = ctx.workdir.stat()
    assert (int(uid), int(gid)) == (owner.st_uid, owner.st_gid)
    if os.geteuid() == 0:  # an id of the session's own: neither root's nor another session's
        assert owner.st_uid not in (0, pwd.getpwnam("nobody").pw_uid, other.workdir.stat().st_uid)
    else:
        assert int(uid) == os.geteuid()


# -- timeouts kill everything ---------------------------------------------------------------


async def test_a_timeout_kills_sleep_1000(make_context: Any, sandbox_kind: str, call: Any) -> None:
    started = time.monotonic()
    result = await call(
        run_shell, make_context(sandbox_kind), command="sleep 1000", timeout_seconds=0.5
    )
    assert time.monotonic() - started < 5
    assert header(result.content)["timed_out"] == "true"
    assert "killed after 0.5 s" in result.content
    assert result.is_error


async def test_a_timeout_leaves_no_background_child(
    make_context: Any, sandbox_kind: str, call: Any, never_appears: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    # Control: the child really writes its marker when nothing kills it.
    result = await call(
        run_shell, ctx, command="(sleep 0.2; touch control) & sleep 0.5", timeout_seconds=10
    )
    assert header(result.content)["timed_out"] == "false"
    assert (ctx.workdir / "control").exists()

    result = await call(
        run_shell, ctx, command="(sleep 0.6; touch survivor) & sleep 1000", timeout_seconds=0.3
    )
    assert header(result.content)["timed_out"] == "true"
    assert await never_appears(ctx.workdir / "survivor", 1.2)


async def test_passthrough_cannot_reach_a_setsid_grandchild(
    make_context: Any, call: Any, never_appears: Any
) -> None:
    """Control for the next test: setsid really leaves the process group."""
    ctx = make_context("passthrough")
    assert ctx.workdir is not None
    await call(
        run_shell,
        ctx,
        command="setsid sh -c 'sleep 0.6; touch escaped' & sleep 1000",
        timeout_seconds=0.3,
    )
    assert not await never_appears(ctx.workdir / "escaped", 3.0)


@needs_pid_namespace
async def test_restricted_kills_a_setsid_grandchild_with_the_namespace(
    make_context: Any, call: Any, never_appears: Any
) -> None:
    ctx = make_context("restricted")
    assert ctx.workdir is not None
    result = await call(
        run_shell,
        ctx,
        command="setsid sh -c 'sleep 0.6; touch escaped' & sleep 1000",
        timeout_seconds=0.3,
    )
    assert header(result.content)["timed_out"] == "true"
    assert await never_appears(ctx.workdir / "escaped", 1.2)


async def test_timeout_limits(make_context: Any, call: Any) -> None:
    tool = RunShell(ShellSettings(default_timeout_seconds=5, max_timeout_seconds=10))
    ctx = make_context()
    result = await call(tool, ctx, command="echo ok", timeout_seconds=10)  # control: at the limit
    assert section(result.content, "stdout") == "ok"
    with pytest.raises(ToolError, match="timeout_seconds is 11; the limit is 10"):
        await call(tool, ctx, command="echo ok", timeout_seconds=11)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ToolArgumentError, match="timeout_seconds"):
            tool.parse_arguments({"command": "true", "timeout_seconds": bad})


# -- output ---------------------------------------------------------------------------------


async def test_output_is_capped_with_a_marker(
    make_context: Any, sandbox_kind: str, call: Any
) -> None:
    tool = RunShell(ShellSettings(max_output_bytes=1024))
    ctx = make_context(sandbox_kind)
    small = await call(tool, ctx, command="head -c 1000 /dev/zero | tr '\\0' x")  # control
    assert header(small.content)["truncated"] == "false"
    assert section(small.content, "stdout") == "x" * 1000

    result = await call(tool, ctx, command="head -c 5000 /dev/zero | tr '\\0' x; echo e >&2")
    assert header(result.content)["truncated"] == "true"
    stdout = section(result.content, "stdout")
    assert stdout.startswith("x" * 1024)
    assert stdout.endswith("[output truncated: 3976 bytes dropped]")
    assert section(result.content, "stderr") == "e"
    assert len(result.content) < 1500


async def test_terminal_escapes_and_controls_are_stripped(
    make_context: Any, sandbox_kind: str, call: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    command = (
        r"printf '\033[31mred\033[0m \033]0;title\007bell\007 cr\r del\177 \033[2Jtab\tend\n'"
        " | tee raw.bin; printf 'bad \\377 utf8\\n'"
    )
    result = await call(run_shell, ctx, command=command)
    raw = (ctx.workdir / "raw.bin").read_bytes()
    # Control: the command really wrote the escapes and controls.
    for sequence in (b"\x1b[31m", b"\x1b]0;title\x07", b"\x07", b"\r", b"\x7f", b"\x1b[2J"):
        assert sequence in raw
    stdout = section(result.content, "stdout")
    assert stdout == "red bell cr del tab\tend\nbad \ufffd utf8"
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in result.content)


async def test_secrets_do_not_reach_a_passthrough_command(
    make_context: Any, monkeypatch: pytest.MonkeyPatch, call: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("LD_PRELOAD", "/nowhere.so")
    monkeypatch.setenv("KOBOI_SHELL_TEST_PLAIN", "plain-value")
    result = await call(run_shell, make_context(), command="env")
    stdout = section(result.content, "stdout")
    assert "KOBOI_SHELL_TEST_PLAIN=plain-value" in stdout  # control: the environment is passed
    assert "sk-secret-value" not in stdout
    assert "LD_PRELOAD" not in stdout


# -- cwd ------------------------------------------------------------------------------------


async def test_cwd_inside_the_workdir(make_context: Any, sandbox_kind: str, call: Any) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    await call(run_shell, ctx, command="mkdir -p sub/deeper")
    for cwd in ("sub/deeper", "./sub/deeper", str(ctx.workdir / "sub" / "deeper")):
        result = await call(run_shell, ctx, command="pwd", cwd=cwd)
        assert section(result.content, "stdout") == str(ctx.workdir / "sub" / "deeper"), cwd
    result = await call(run_shell, ctx, command="pwd", cwd=".")
    assert section(result.content, "stdout") == str(ctx.workdir)


async def test_cwd_outside_the_workdir_is_refused(
    make_context: Any, sandbox_kind: str, call: Any
) -> None:
    ctx = make_context(sandbox_kind)
    workdir = ctx.workdir
    assert workdir is not None
    # A sibling whose name starts with the workdir's: a string prefix check would pass it.
    evil = workdir.parent / (workdir.name + "_evil")
    evil.mkdir()
    # Made by the command's own user (the session's under restricted), so it can write there.
    await call(run_shell, ctx, command="mkdir sub && ln -s /etc link && echo x > file")
    cases = {
        "/etc": "outside the working directory",
        str(evil): "outside the working directory",
        "..": "contains '..'",
        "sub/../..": "contains '..'",
        f"../{workdir.name}_evil": "contains '..'",
        "link": "leads outside",
        "missing": "does not exist",
    }
    for cwd, message in cases.items():
        with pytest.raises(ToolError, match=message):
            await call(run_shell, ctx, command="touch ran-here", cwd=cwd)
    with pytest.raises(ToolError, match="not a directory"):
        await call(run_shell, ctx, command="true", cwd="file")
    assert not (evil / "ran-here").exists()
    assert not await anyio.Path("/etc/ran-here").exists()
    # Control: the same command with a cwd inside runs.
    await call(run_shell, ctx, command="touch ran-here", cwd="sub")
    assert (workdir / "sub" / "ran-here").exists()


@needs_hard
async def test_runs_under_hard_isolation(open_dir: Path, make_sandbox_at: Any, call: Any) -> None:
    sandbox = make_sandbox_at("hard", open_dir / "hard")
    ctx = ToolContext("s1", "c1", 1, sandbox, workdir=sandbox.workdir_for("s1"))
    result = await call(run_shell, ctx, command="echo inside > f; cat f; cat /root/x 2>&1; true")
    stdout = section(result.content, "stdout")
    assert stdout.startswith("inside\n")
    assert "Permission denied" in stdout or "No such file" in stdout


def test_command_arguments_are_checked() -> None:
    for bad in ({"command": ""}, {"command": "  \n"}, {"command": "a\0b"}, {"command": 42}):
        with pytest.raises(ToolArgumentError, match="run_shell"):
            run_shell.parse_arguments(bad)
    with pytest.raises(ToolArgumentError, match="command"):
        run_shell.parse_arguments({"command": "x" * (MAX_COMMAND_CHARS + 1)})
    assert run_shell.parse_arguments({"command": "x" * MAX_COMMAND_CHARS})  # control
