"""The autonomy modes, as one table (docs/governance.md prints the same table).

=======  ==========  ==============  =========================  ===========
mode     safe        planning tool   moderate                   destructive
=======  ==========  ==============  =========================  ===========
chat     run         refused         refused                    refused
plan     run         run             refused                    refused
act      run         run             approval                   approval
auto     run         run             run in an isolating        approval
                                     sandbox, else approval
yolo     run         run             run                        run
=======  ==========  ==============  =========================  ===========

"run" still passes every later stage: a policy ``deny`` (or ``ask``) rule,
guardrails, rate limits, the sandbox and the unattended-destruction rule apply in every mode,
yolo included. In ``act``, ``agent.approval_risk`` moves the line: with
``approval_risk: destructive`` moderate tools run without asking.
"""

from __future__ import annotations

from typing import Literal

from koboi.tools import Risk, Tool

Need = Literal["run", "approval", "refused"]

_RANK = {Risk.SAFE: 0, Risk.MODERATE: 1, Risk.DESTRUCTIVE: 2}

MODES = ("chat", "plan", "act", "auto", "yolo")


def mode_need(mode: str, tool: Tool, *, isolated: bool, approval_risk: Risk) -> Need:
    """What ``mode`` requires before ``tool`` may run."""
    if tool.risk == Risk.SAFE and _RANK[approval_risk] > 0:
        return "run"
    if mode == "chat":
        return "run" if tool.risk == Risk.SAFE else "refused"
    if tool.planning:
        return "run"
    if mode == "plan":
        return "run" if tool.risk == Risk.SAFE else "refused"
    if mode == "yolo":
        return "run"
    if mode == "auto":
        if tool.risk == Risk.MODERATE:
            return "run" if isolated else "approval"
        return "approval"
    # act
    return "approval" if _RANK[tool.risk] >= _RANK[approval_risk] else "run"


def refusal(mode: str, tool: Tool) -> str:
    """What the model is told when the mode refuses a tool."""
    allowed = "read-only tools" if mode == "chat" else "read-only and planning tools"
    return (
        f"agent.mode is '{mode}': only {allowed} may run, and '{tool.name}' is "
        f"{tool.risk.value}; ask the user to switch to 'act' mode if it must run"
    )
