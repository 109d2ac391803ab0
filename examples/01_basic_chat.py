"""Basic chat: an agent from a config file, one question, the answer and its usage.

Offline: configs/simple_chat.yaml uses the scripted model (no key, no network).
Its sessions go to the default store; this example points that at a temporary
directory so that running it leaves nothing behind.

    python examples/01_basic_chat.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anyio

from koboi import KoboiAgent

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "simple_chat.yaml"


async def main() -> None:
    async with KoboiAgent.from_config(CONFIG) as agent:
        result = await agent.run("What is 2 + 2?")
        print(result.output)
        print(
            f"outcome {result.outcome}, {result.usage.total_tokens} tokens, session {result.session_id}"
        )
        # The same session again: the conversation continues from its journal.
        again = await agent.run("And 3 * 3?", session_id=result.session_id)
        print(again.output)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as state:
        os.environ["KOBOI_STORE"] = f"sqlite:///{state}/koboi.db"
        anyio.run(main)
