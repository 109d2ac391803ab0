"""Policy rules: allow a tool without asking, deny it for some arguments, and let the
mode decide the rest (deny by default: nobody is asked here, so "ask" is a no).
Every decision is journaled; the audit trail shows which stage refused and why.

    python examples/11_policy.py
"""

from __future__ import annotations

import tempfile

import anyio

from koboi import KoboiAgent
from koboi.events import ToolResultEvent


def config(workdir: str) -> dict[str, object]:
    return {
        "agent": {"name": "policed", "mode": "act"},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"log (?P<line>[\w-]+)",
                    "tool": "append_log",
                    "arguments": {"line": "{line}"},
                    "reply": "{result}",
                },
                {
                    "match": r"(?P<expr>\d[\d\s+*/-]*\d)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{result}",
                },
            ],
        },
        "tools": {"builtin": ["append_log", "calculator"]},
        "sandbox": {"backend": "passthrough", "workdir": workdir},
        "store": {"url": "memory://"},
        "governance": {
            "policy": {
                "rules": [
                    {
                        "tool": "append_log",
                        "args": {"line": "secret*"},
                        "action": "deny",
                        "reason": "secrets stay out of the log",
                    },
                    {"tool": "append_log", "args": {"line": "ok-*"}, "action": "allow"},
                ]
            }
        },
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with KoboiAgent.from_dict(config(workdir)) as agent:
            for message in ("log ok-1", "log secret-plan", "log other", "12 * 3"):
                async for event in agent.stream(message):
                    if isinstance(event, ToolResultEvent):
                        who = f"refused by {event.refused_by}" if event.refused_by else "ran"
                        print(f"{message!r:18} {event.name}: {who}: {event.content}")


if __name__ == "__main__":
    anyio.run(main)
