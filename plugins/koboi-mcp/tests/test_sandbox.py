"""A stdio server is a process of the agent's sandbox: hard isolation holds for it.

The server here is the standard-library one (``servers/plain_stdio_server.py``)
on the system's python3: the restricted sandbox keeps koboi's virtualenv, and so
the MCP SDK, out of a confined process's reach.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi import KoboiAgent

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 the server tries to reach: its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


def _config(kit: Any, open_dir: Path, isolation: str) -> dict[str, Any]:
    served = open_dir / "server"
    served.mkdir(exist_ok=True)
    served.chmod(0o755)
    script = served / "plain_stdio_server.py"
    shutil.copy(kit.plain, script)
    script.chmod(0o644)
    return kit.agent_config(
        open_dir,
        {"plain": {"command": "/usr/bin/python3", "args": [str(script)]}},
        sandbox={
            "backend": "restricted",
            "isolation": isolation,
            "workdir": str(open_dir / f"workdirs-{isolation}"),
            "read_only": [str(served)],
        },
    )


def _hard_available(kit: Any) -> None:
    from koboi_sandbox.options import RestrictedOptions
    from koboi_sandbox.probe import probe
    from koboi_sandbox.restricted import required_gaps

    gaps = required_gaps(RestrictedOptions(isolation="hard"), probe())
    kit.require(not gaps, f"isolation hard is not available here: {'; '.join(gaps)}")


async def test_a_stdio_server_under_hard_isolation_cannot_open_a_socket(
    kit: Any, open_dir: Path, listener: int
) -> None:
    _hard_available(kit)
    async with KoboiAgent.from_dict(_config(kit, open_dir, "hard")) as agent:
        assert agent.sandbox.name == "restricted"
        probe = await agent.call_tool("plain__probe_network", {"port": listener})
    assert probe.ok, probe.content
    assert probe.content.startswith("refused: PermissionError")

    # Control: the same server, the same probe, under standard isolation (network allowed).
    async with KoboiAgent.from_dict(_config(kit, open_dir, "standard")) as agent:
        probe = await agent.call_tool("plain__probe_network", {"port": listener})
    assert probe.ok and probe.content == "connected"


async def test_a_confined_server_gets_only_the_named_variables(
    kit: Any, open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_TEST_SECRET_TOKEN", "tok_" + "y" * 32)
    monkeypatch.setenv("KOBOI_TEST_NAMED", "named")
    config = _config(kit, open_dir, "standard")
    config["mcp"]["servers"]["plain"]["pass_env"] = ["PATH", "KOBOI_TEST_NAMED"]
    async with KoboiAgent.from_dict(config) as agent:
        secret = await agent.call_tool("plain__environment", {"name": "KOBOI_TEST_SECRET_TOKEN"})
        named = await agent.call_tool("plain__environment", {"name": "KOBOI_TEST_NAMED"})
    assert secret.ok and secret.content == "not set"
    assert named.ok and named.content == "set"  # control
