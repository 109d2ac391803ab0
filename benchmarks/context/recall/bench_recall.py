"""Recall@5 of facts planted in a synthetic multi-session conversation, with and without
proactive memory.

    uv run python benchmarks/context/recall/generate.py     # conversation.json (seed 20)
    uv run python benchmarks/context/recall/bench_recall.py

Every message of the ten sessions is run through a real agent (in-process store,
koboi-memory's tools and interceptor). The model is scripted: it calls
``memory_store`` when the user says "Please remember: ..." and otherwise just
answers; asked to extract (proactive memory's side call), it returns each "my X
is Y" sentence of the exchange, as an LLM asked the same would. Then each planted
fact's question ("What is my X?") is searched as recall searches it before a
model call, and a fact counts as recalled when its value is in the top 5.

- without proactive memory: only what the model chose to store is there;
- with proactive memory (extract + recall): what the turns taught is stored too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent


def model_class() -> Any:
    from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
    from koboi.provider import ModelProvider
    from koboi.sidecalls import call_purpose

    class Scripted(ModelProvider):
        name = "recall-bench"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1]
            if call_purpose() == "memory.extract":
                said = last.content.split("\nAssistant:")[0]
                facts = [
                    f"The user's {t} is {v}."
                    for t, v in re.findall(r"[Mm]y ([^.]+?) is ([^.\s]+)", said)
                ]
                return ModelResponse(
                    message=Message.assistant(json.dumps({"facts": facts, "core": []}))
                )
            user = next(m for m in reversed(request.messages) if m.role == "user")
            found = re.match(r"Please remember: (.+)", user.content)
            if found and last.role == "user":
                turn = sum(1 for m in request.messages if m.role == "assistant")
                call = ToolCall(
                    id=f"call_{turn}", name="memory_store", arguments={"text": found.group(1)}
                )
                return ModelResponse(
                    message=Message.assistant("", (call,)), finish_reason="tool_calls"
                )
            return ModelResponse(
                message=Message.assistant("ok"), usage=Usage(input_tokens=1, output_tokens=1)
            )

    return Scripted


async def recall_at_5(data: dict[str, Any], proactive: bool) -> tuple[float, float, float]:
    import koboi_memory.plugin
    import koboi_scripted.plugin
    from koboi import KoboiAgent, PluginHost
    from koboi.plugins import use_host
    from koboi.store import InMemoryStore
    from koboi_memory.assembly import memory_for, scope_for

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_memory.plugin, "memory", dist="koboi-memory")
    memory_section: dict[str, Any] = {"owner": "bench"}
    if proactive:
        memory_section["proactive"] = {"enabled": True, "extract": True, "recall": True}
    config = {
        "agent": {"name": "recall", "stream": False},
        "llm": {"provider": "scripted"},
        "tools": {"builtin": ["memory_store", "memory_recall"]},
        "memory": memory_section,
    }
    with use_host(host):
        async with KoboiAgent.from_dict(
            config, provider=model_class()(), store=InMemoryStore()
        ) as agent:
            for messages in data["sessions"]:
                session = None
                for text in messages:
                    result = await agent.run(text, session_id=session)
                    session = result.session_id
            memory = await memory_for(agent.config, agent.store, host)
            scope = scope_for(agent.config, None)
            found = {True: 0, False: 0}
            for fact in data["planted"]:
                hits = await memory.search(scope, fact["question"], k=5)
                if any(fact["value"] in h.fact.text for h in hits):
                    found[fact["explicit"]] += 1
    explicit = sum(1 for f in data["planted"] if f["explicit"])
    incidental = len(data["planted"]) - explicit
    total = (found[True] + found[False]) / len(data["planted"])
    return total, found[True] / explicit, found[False] / incidental


async def main() -> None:
    data = json.loads((HERE / "conversation.json").read_text())
    print(
        f"{len(data['planted'])} planted facts in {len(data['sessions'])} sessions (seed "
        f"{data['seed']}); recall@5 of the question 'What is my X?'"
    )
    print(f"{'':<28} {'all':>6} {'said explicitly':>16} {'said in passing':>16}")
    for proactive in (False, True):
        total, explicit, incidental = await recall_at_5(data, proactive)
        label = "with proactive memory" if proactive else "without (tools only)"
        print(f"{label:<28} {total:>6.2f} {explicit:>16.2f} {incidental:>16.2f}")


if __name__ == "__main__":
    anyio.run(main)
