"""append_log: what it writes, where, and its test hooks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pluggy
import pytest

from koboi import hookspecs
from koboi.errors import ToolError
from koboi.sandbox import PassthroughSandbox
from koboi.tools import Risk, Tool, ToolContext
from koboi_tools_demo import hooks, plugin
from koboi_tools_demo.tools import LOG_NAME, append_log

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")
    for name in (hooks.BEFORE_EFFECT, hooks.AFTER_EFFECT, hooks.IN_MODEL_CALL, hooks.MARKER):
        monkeypatch.delenv(name, raising=False)


def _ctx(workdir: Path | None) -> ToolContext:
    return ToolContext(
        session_id="s",
        call_id="c",
        step=1,
        sandbox=PassthroughSandbox(workdir=workdir),
        workdir=workdir,
    )


async def test_appends_one_line_per_call(tmp_path: Path) -> None:
    for i in (1, 2, 2):
        result = await append_log(append_log.parse_arguments({"line": f"step-{i}"}), _ctx(tmp_path))
        assert result.content == f"appended step-{i}"
        assert not result.is_error
    assert (tmp_path / LOG_NAME).read_text() == "step-1\nstep-2\nstep-2\n"


async def test_without_workdir_it_writes_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    await append_log(append_log.parse_arguments({"line": "x"}), _ctx(None))
    assert (tmp_path / LOG_NAME).read_text() == "x\n"


async def test_a_newline_in_the_line_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="single line"):
        await append_log(append_log.parse_arguments({"line": "a\nb"}), _ctx(tmp_path))
    assert not (tmp_path / LOG_NAME).exists()


def test_is_declared_moderate_and_not_idempotent() -> None:
    assert append_log.risk is Risk.MODERATE
    assert append_log.idempotent is False


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "tools-demo"]
    assert ep.value == "koboi_tools_demo.plugin"


def _pm() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    return pm


def test_registers_append_log() -> None:
    registered: list[Any] = []
    _pm().hook.koboi_register_tools(register=registered.append)
    assert [t.name for t in registered] == ["append_log"]
    assert all(isinstance(t, Tool) for t in registered)


class _Config:
    class tools:
        builtin = ("append_log",)


def test_the_model_call_hook_is_registered_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registered: list[Any] = []
    _pm().hook.koboi_register_interceptors(register=registered.append, config=_Config())
    assert registered == []
    monkeypatch.setenv(hooks.IN_MODEL_CALL, "3")
    _pm().hook.koboi_register_interceptors(register=registered.append, config=_Config())
    assert [type(i) for i in registered] == [hooks.PauseInModelCall]


@pytest.mark.parametrize(
    ("variable", "written"), [(hooks.BEFORE_EFFECT, ""), (hooks.AFTER_EFFECT, "step-2\n")]
)
def test_pause_hooks_stop_at_the_named_line(tmp_path: Path, variable: str, written: str) -> None:
    """The hook writes its marker and sleeps; the log shows which side of the effect it is."""
    code = textwrap.dedent(
        f"""
        import anyio
        from pathlib import Path
        from koboi.sandbox import PassthroughSandbox
        from koboi.tools import ToolContext
        from koboi_tools_demo.tools import append_log
        wd = Path({str(tmp_path)!r})
        ctx = ToolContext("s", "c", 1, PassthroughSandbox(workdir=wd), wd)
        anyio.run(append_log, append_log.parse_arguments({{"line": "step-2"}}), ctx)
        """
    )
    env = {**os.environ, variable: "step-2", hooks.PAUSE_SECONDS: "30"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    marker = tmp_path / hooks.MARKER_NAME
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the process ended instead of pausing"
            time.sleep(0.02)
        assert marker.read_text().split() == [
            "before" if variable == hooks.BEFORE_EFFECT else "after",
            "step-2",
        ]
        log = tmp_path / LOG_NAME
        assert (log.read_text() if log.exists() else "") == written
    finally:
        proc.kill()
        proc.wait()
