"""What koboi-otel's tests share: a scripted agent with a tool call and a sub-agent, and
a canary secret that must never leave a run through telemetry. (A module of its own:
under importlib mode every tests directory's conftest is "conftest", so a test that
imported from it could get another plugin's when all suites run in one process.)"""

from __future__ import annotations

from typing import Any

from koboi import ToolContext, tool

#: A GitHub token by its shape: the kernel's secret rules mask it wherever it appears.
CANARY = "ghp_Zq8vN3xK1mT5rW2yB7cD4fH6jL9pQ0sA2uE5"
#: What the model asks the helper: the part of the argument that is no secret.
QUESTION = "What is 6 * 7?"


@tool(idempotent=True, thread=False)
async def ask_helper(task: str, ctx: ToolContext) -> str:
    """Ask a helper agent (a sub-agent with the calculator) to do a task.

    Args:
        task: What to do (anything after " token " is a credential for the helper).
    """
    question = task.split(" token ")[0]
    result = await ctx.run_subagent(question, tools=["calculator"], name="helper")
    return result.output


def agent_config(telemetry: dict[str, Any] | None) -> dict[str, Any]:
    """The scripted agent: its one message asks the helper, which calls the calculator."""
    config: dict[str, Any] = {
        "agent": {"name": "otel-demo", "max_iterations": 6},
        "llm": {
            "provider": "scripted",
            "model": "scripted-1",
            "rules": [
                {
                    "match": r"^ask the helper: (?P<task>.+)$",
                    "tool": "ask_helper",
                    "arguments": {"task": "{task}"},
                    "reply": "The helper says: {result}",
                },
                {
                    "match": r"(?P<expr>\d+ \* \d+)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                },
            ],
        },
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }
    if telemetry is not None:
        config["telemetry"] = telemetry
    return config


MESSAGE = f"ask the helper: {QUESTION} token {CANARY}"
