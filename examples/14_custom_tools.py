"""Custom tools: typed Python functions become tools (the schema comes from the type
hints and the docstring). A tool declares its risk; a "safe", idempotent one runs in
any mode without asking.

    python examples/14_custom_tools.py
"""

from __future__ import annotations

import anyio

from koboi import KoboiAgent, tool


@tool(risk="safe", idempotent=True)
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text to count.
    """
    return len(text.split())


@tool(risk="safe", idempotent=True)
async def shout(text: str, times: int = 1) -> str:
    """Say a text loudly.

    Args:
        text: What to say.
        times: How many times.
    """
    return " ".join([text.upper() + "!"] * times)


CONFIG = {
    "agent": {"name": "custom", "mode": "chat"},
    "llm": {
        "provider": "scripted",
        "rules": [
            {
                "match": r"how many words in (?P<text>.+)",
                "tool": "word_count",
                "arguments": {"text": "{text}"},
                "reply": "{result} words.",
            },
            {
                "match": r"shout (?P<text>\w+)",
                "tool": "shout",
                "arguments": {"text": "{text}", "times": 2},
                "reply": "{result}",
            },
        ],
    },
    "store": {"url": "memory://"},
}


async def main() -> None:
    async with KoboiAgent.from_dict(CONFIG, extra_tools=[word_count, shout]) as agent:
        print(sorted(agent.tools))
        print((await agent.run("how many words in the quick brown fox")).output)
        print((await agent.run("shout hello")).output)


if __name__ == "__main__":
    anyio.run(main)
