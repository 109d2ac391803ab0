"""Tool use as it happens: stream an agent's events (tool calls, results, the answer),
and call one tool directly, through the same governance, without a model.

    python examples/02_tool_use.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anyio

from koboi import KoboiAgent
from koboi.events import FinalEvent, ToolCallEvent, ToolResultEvent

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


async def main() -> None:
    async with KoboiAgent.from_config(CONFIG) as agent:
        async for event in agent.stream("What is (17 + 4) * 2?"):
            if isinstance(event, ToolCallEvent):
                print(f"-> {event.call.name} {event.call.arguments}")
            elif isinstance(event, ToolResultEvent):
                print(f"<- {event.content}")
            elif isinstance(event, FinalEvent):
                print(f"answer: {event.result.output}")
        # One governed call, no model: mode, policy, approvals, journal and audit apply.
        called = await agent.call_tool("calculator", {"expression": "6 * 7"})
        print(f"calculator(6 * 7) = {called.content}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as state:
        os.environ["KOBOI_STORE"] = f"sqlite:///{state}/koboi.db"
        anyio.run(main)
