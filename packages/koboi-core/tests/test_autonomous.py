"""The unattended-destruction rule: an autonomous run may only run destructive tools in an
isolating sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent, tool
from koboi import journal as J
from koboi.errors import KoboiError
from koboi.sandbox import DEFAULT_OUTPUT_LIMIT, PassthroughSandbox, ProcessResult
from koboi.store import InMemoryStore

pytestmark = pytest.mark.anyio


@tool(risk="destructive")
def wipe(path: str) -> str:
    """Delete everything under a path."""
    return f"wiped {path}"


@tool
def look(path: str) -> str:
    """Read a path."""
    return f"looked at {path}"


SCRIPT = {
    "provider": "scripted",
    "script": [{"tool_calls": [{"name": "wipe", "arguments": {"path": "/data"}}]}, "done"],
}


class Isolating(PassthroughSandbox):
    """A sandbox that says it isolates (the real one is koboi-sandbox's; this one can stop)."""

    name = "isolating"

    def __init__(self) -> None:
        super().__init__(None)
        self.isolating = True

    @property
    def isolated(self) -> bool:
        return self.isolating

    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: Any = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        max_output: int = DEFAULT_OUTPUT_LIMIT,
        session_id: str | None = None,
    ) -> ProcessResult:
        raise AssertionError("not used")


async def test_autonomous_agent_with_a_destructive_tool_and_passthrough_is_refused() -> None:
    agent = KoboiAgent.from_dict({"llm": SCRIPT}, extra_tools=[wipe], autonomous=True)
    with pytest.raises(KoboiError, match=r"refused before starting.*wipe.*passthrough"):
        async with agent:
            pass


async def test_the_same_agent_starts_when_a_human_can_approve() -> None:
    async with KoboiAgent.from_dict(
        {"llm": SCRIPT}, extra_tools=[wipe], approver=AllowAllApprover()
    ) as agent:
        result = await agent.run("wipe it")
    assert result.output == "done"


async def test_autonomous_agent_without_destructive_tools_starts() -> None:
    script = {"provider": "scripted", "script": ["nothing to do"]}
    async with KoboiAgent.from_dict({"llm": script}, extra_tools=[look], autonomous=True) as agent:
        assert (await agent.run("hi")).outcome == "completed"


async def test_each_destructive_call_is_checked_again(tmp_path: Path) -> None:
    sandbox = Isolating()
    store = InMemoryStore()
    agent = KoboiAgent.from_dict(
        {"llm": SCRIPT},
        extra_tools=[wipe],
        autonomous=True,
        sandbox=sandbox,
        store=store,
        approver=AllowAllApprover(),
    )
    async with agent:
        sandbox.isolating = False  # it stopped isolating after the run started
        result = await agent.run("wipe it")
    events = await store.read(result.session_id)
    refused = [e for e in events if e.type == J.TOOL_CALL_REFUSED]
    assert len(refused) == 1
    assert refused[0].data["stage"] == "sandbox"
    assert "autonomous" in refused[0].data["reason"]
    assert not any(e.type == J.TOOL_CALL_STARTED for e in events)


@pytest.mark.parametrize("autonomous", [True, False])
async def test_the_journal_records_whether_a_run_was_autonomous(autonomous: bool) -> None:
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "scripted", "script": ["ok"]}},
        store=InMemoryStore(),
        autonomous=autonomous,
    )
    async with agent:
        result = await agent.run("go")
        (started,) = [
            e for e in await agent.store.read(result.session_id) if e.type == J.RUN_STARTED
        ]
    assert started.data["autonomous"] is autonomous
