"""The mode table, tested row by row through real runs (docs/governance.md prints the same table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent
from koboi.errors import KoboiError
from koboi_governance import modes

pytestmark = pytest.mark.anyio

KINDS = {"safe": "look", "planning": "plan_step", "moderate": "note", "destructive": "wipe"}
ARGS = {
    "look": {"what": "x"},
    "plan_step": {"step": "x"},
    "note": {"text": "x"},
    "wipe": {"target": "x"},
}

# (mode, kind) -> what happens with an approver that says yes to everything, and without one.
TABLE = {
    "chat": {"safe": "run", "planning": "mode", "moderate": "mode", "destructive": "mode"},
    "plan": {"safe": "run", "planning": "run", "moderate": "mode", "destructive": "mode"},
    "act": {"safe": "run", "planning": "run", "moderate": "approval", "destructive": "approval"},
    # The passthrough sandbox does not isolate, so auto asks for moderate tools too.
    "auto": {"safe": "run", "planning": "run", "moderate": "approval", "destructive": "approval"},
    "yolo": {"safe": "run", "planning": "run", "moderate": "run", "destructive": "run"},
}


async def _outcome(agent: KoboiAgent) -> tuple[str, str | None]:
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    refused = [e for e in events if e.type == "tool_call_refused"]
    asked = any(e.type == "approval_requested" for e in events)
    ran = any(e.type == "tool_call_finished" for e in events)
    if refused:
        return "refused", str(refused[0].data["stage"])
    return ("ran" if ran else "nothing"), ("asked" if asked else None)


@pytest.mark.parametrize("mode", sorted(TABLE))
@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_the_mode_table(make_agent: Any, turn: Any, mode: str, kind: str) -> None:
    name = KINDS[kind]
    script = [turn(name, ARGS[name]), "done"]
    expected = TABLE[mode][kind]

    without = await _outcome(make_agent(script, mode=mode))
    with_yes = await _outcome(make_agent(script, mode=mode, approver=AllowAllApprover()))

    if expected == "run":
        # Runs without any approver: nobody is asked.
        assert without == ("ran", None)
        assert with_yes == ("ran", None)
    elif expected == "approval":
        # Denied by default without an approver; asked, then run, with one.
        assert without == ("refused", "approval")
        assert with_yes == ("ran", "asked")
    else:
        # Refused by the mode whoever would approve: the approver is never asked.
        assert without == ("refused", "mode")
        assert with_yes == ("refused", "mode")


async def test_auto_runs_moderate_tools_without_asking_inside_an_isolating_sandbox(
    make_agent: Any, turn: Any, tmp_path: Path
) -> None:
    sandbox = {"sandbox": {"backend": "restricted", "workdir": str(tmp_path / "w")}}
    moderate = [turn("note", {"text": "x"}), "done"]
    destructive = [turn("wipe", {"target": "x"}), "done"]
    assert await _outcome(make_agent(moderate, mode="auto", extra=sandbox)) == ("ran", None)
    # Destructive still needs a yes inside the sandbox.
    assert await _outcome(make_agent(destructive, mode="auto", extra=sandbox)) == (
        "refused",
        "approval",
    )
    # Control: the same moderate call outside the sandbox asks.
    assert await _outcome(make_agent(moderate, mode="auto")) == ("refused", "approval")


async def test_a_mode_refusal_tells_the_model_what_to_do(make_agent: Any, turn: Any) -> None:
    async with make_agent([turn("wipe", {"target": "x"}), "done"], mode="chat") as agent:
        result = await agent.run("go")
    told = result.messages[2].content
    assert "agent.mode is 'chat'" in told and "'wipe' is destructive" in told


async def test_chat_without_a_plugin_that_enforces_modes_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from koboi.plugins import PluginHost

    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "governance")
    host = PluginHost()
    config = {
        "agent": {"mode": "chat"},
        "llm": {"provider": "scripted", "script": ["hi"]},
        "store": {"url": "memory://"},
    }
    with pytest.raises(KoboiError, match="no installed plugin enforces modes"):
        async with KoboiAgent.from_dict(config, base_dir=tmp_path, host=host):
            pass
    # Control: act needs only the kernel's approvals, so it opens.
    config["agent"] = {"mode": "act"}
    async with KoboiAgent.from_dict(config, base_dir=tmp_path, host=host) as agent:
        assert (await agent.run("x")).output == "hi"


def test_the_documented_table_is_what_the_code_does(demo_tools: dict[str, Any]) -> None:
    from koboi.tools import Risk

    docs = (Path(__file__).parents[3] / "docs" / "governance.md").read_text(encoding="utf-8")
    rows = [
        [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        for line in docs.splitlines()
        if line.startswith(("| `chat`", "| `plan`", "| `act`", "| `auto`", "| `yolo`"))
    ]
    assert [row[0] for row in rows] == list(modes.MODES)
    columns = ["look", "plan_step", "note", "wipe"]
    for mode, *cells in rows:
        for name, cell in zip(columns, cells, strict=True):
            tool_obj = demo_tools[name]
            outside = modes.mode_need(mode, tool_obj, isolated=False, approval_risk=Risk.MODERATE)
            inside = modes.mode_need(mode, tool_obj, isolated=True, approval_risk=Risk.MODERATE)
            if cell == "run in an isolating sandbox, else approval":
                assert (inside, outside) == ("run", "approval"), (mode, name)
            else:
                assert (
                    inside
                    == outside
                    == {"run": "run", "refused": "refused", "approval": "approval"}[cell]
                ), (mode, name, cell)
        # The kind the module docstring prints agrees with the documented cells too.
        assert mode in (modes.__doc__ or "")
