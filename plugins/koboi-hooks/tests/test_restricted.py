"""Hooks under the restricted sandbox: the contract scripts run unchanged, confined like tools.

Under ``isolation: hard`` a hook cannot reach the network (a listener on loopback
counts zero connections; the control under ``network: allow`` counts one), and a
secret never reaches it even when the config names it. Fails instead of skipping
under ``CI`` when the machine lacks what hard isolation needs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi import PluginHost
from koboi_testing.wire import WireServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Ran = Any
Kit = Any
SCRIPTS = Path(__file__).parent / "scripts"


def _require_hard() -> None:
    from koboi_sandbox.options import RestrictedOptions
    from koboi_sandbox.probe import probe
    from koboi_sandbox.restricted import required_gaps

    gaps = required_gaps(RestrictedOptions(isolation="hard"), probe())
    if not gaps:
        return
    what = f"isolation hard is not available here: {'; '.join(gaps)}"
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """Hook scripts and workdirs where the session's own uid may read (tmp_path is root's)."""
    path = Path(tempfile.mkdtemp(prefix="koboi-hooks-test-"))
    path.chmod(0o755)
    hooks = path / "hooks"
    shutil.copytree(SCRIPTS, hooks)
    for item in [hooks, *hooks.iterdir()]:
        item.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listener() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


def _sandbox(open_dir: Path, **options: Any) -> dict[str, Any]:
    return {
        "sandbox": {
            "backend": "restricted",
            "workdir": str(open_dir / "workdirs"),
            "read_only": [str(open_dir / "hooks")],
            **options,
        }
    }


async def test_contract_scripts_run_unchanged_under_hard_isolation(
    host: PluginHost,
    ran: Ran,
    tmp_path: Path,
    kit: Kit,
    open_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _require_hard()
    from koboi_sandbox import plugin as sandbox_plugin

    host.add_plugin(sandbox_plugin, "sandbox", dist="koboi-sandbox")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "s" * 40)
    hooks_dir = open_dir / "hooks"
    hooks = {
        "before_tool_call": [
            {
                "matcher": "run_shell",
                "command": ["/bin/bash", str(hooks_dir / "block_rm.sh")],
                "timeout": 120,
            }
        ],
        # Named explicitly, and still the sandbox keeps the secret out.
        "user_prompt": [
            {
                "command": ["/bin/bash", str(hooks_dir / "read_secret.sh")],
                "env": ["OPENAI_API_KEY"],
                "timeout": 120,
            }
        ],
    }
    turns = [kit.call("run_shell", command="rm -rf /"), kit.call("run_shell", command="ls"), "done"]
    agent, model = kit.make_agent(
        hooks, turns, ran, tmp_path, extra=_sandbox(open_dir, isolation="hard")
    )
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    assert ran.commands == ["ls"]
    assert [d["decision"] for d in kit.hook_events(events)] == ["none", "block", "none"]
    context = [m.content for m in model.requests[0].messages if "key=" in m.content]
    assert context == ["key=[] visible=[]"]


async def test_a_hook_reaches_no_network_under_hard_isolation(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit, open_dir: Path, listener: WireServer
) -> None:
    _require_hard()
    from koboi_sandbox import plugin as sandbox_plugin

    host.add_plugin(sandbox_plugin, "sandbox", dist="koboi-sandbox")
    phone_home = [
        "/bin/bash",
        "-c",
        f"cat >/dev/null; (exec 3<>/dev/tcp/127.0.0.1/{listener.port}) 2>/dev/null && "
        'echo \'{"additionalContext": "sent"}\' || echo \'{"additionalContext": "no network"}\'',
    ]
    # A generous timeout: a hard sandbox starts slowly on a loaded CI machine, and a hook
    # that timed out would also say nothing (the assertion below would not say why).
    hooks = {"user_prompt": [{"command": phone_home, "timeout": 120}]}
    agent, model = kit.make_agent(
        hooks, ["ok"], ran, tmp_path, extra=_sandbox(open_dir, isolation="hard")
    )
    async with agent:
        await agent.run("hi")
    seen = [m.content for m in model.requests[0].messages]
    assert "no network" in seen, seen
    assert listener.connections == 0
    # Control: the same hook where the sandbox allows the network reaches the listener.
    agent, model = kit.make_agent(
        hooks,
        ["ok"],
        ran,
        tmp_path,
        extra=_sandbox(open_dir, isolation="standard", network="allow"),
    )
    async with agent:
        await agent.run("hi")
    assert "sent" in [m.content for m in model.requests[0].messages]
    # The listener counts a connection when its own thread accepts it, which may come a
    # moment after the hook (and the run) ended.
    for _ in range(500):  # up to 10 s
        if listener.connections:
            break
        await anyio.sleep(0.02)
    assert listener.connections == 1
