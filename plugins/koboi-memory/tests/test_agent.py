"""Memory through a real agent: the tools, proactive extraction, recall and the core block,
per principal, journaled so a resumed run sends the same requests; and koboi memory."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import koboi_memory.plugin
import koboi_scripted.plugin
import koboi_store_sql.plugin
from koboi import KoboiAgent, PluginHost
from koboi import journal as J
from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from koboi.plugins import use_host
from koboi.provider import ModelProvider
from koboi.sidecalls import call_purpose
from koboi.store import InMemoryStore
from koboi_cli.app import app

pytestmark = pytest.mark.anyio


@pytest.fixture
def host() -> Iterator[PluginHost]:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_store_sql.plugin, "store-sql", dist="koboi-store-sql")
    host.add_plugin(koboi_memory.plugin, "memory", dist="koboi-memory")
    with use_host(host):
        yield host


class Assistant(ModelProvider):
    """'remember X' -> memory_store; 'recall X' -> memory_recall; anything else: a reply.
    Asked to extract (a side call), it returns 'I like ...' and 'my name is ...' as facts."""

    name = "assistant"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if call_purpose() == "memory.extract":
            text = last.content.split("\nAssistant:")[0]
            facts = [f"The user likes {m}." for m in re.findall(r"I like (\w+)", text)]
            core = [f"The user's name is {m}." for m in re.findall(r"my name is (\w+)", text)]
            return _reply(json.dumps({"facts": facts, "core": core}))
        self.requests.append(request)
        user = next(m for m in reversed(request.messages) if m.role == "user")
        if last.role == "tool":
            return _reply(f"tool said: {last.content}")
        for verb, tool, key in (
            ("remember", "memory_store", "text"),
            ("recall", "memory_recall", "query"),
        ):
            found = re.match(rf"{verb} (.+)", user.content)
            if found:
                call = ToolCall(
                    id=f"c{len(self.requests)}", name=tool, arguments={key: found.group(1)}
                )
                return ModelResponse(
                    message=Message.assistant("", (call,)), finish_reason="tool_calls"
                )
        return _reply("noted")

    def context_of(self, index: int) -> list[str]:
        return [m.content for m in self.requests[index].messages if m.role == "system"]


def _reply(text: str) -> ModelResponse:
    return ModelResponse(
        message=Message.assistant(text), usage=Usage(input_tokens=1, output_tokens=1)
    )


def config(**memory: Any) -> dict[str, Any]:
    return {
        "agent": {"name": "helper", "stream": False},
        "llm": {"provider": "scripted"},
        "tools": {"builtin": ["memory_store", "memory_recall", "memory_forget"]},
        "memory": memory,
    }


async def _run(agent: KoboiAgent, text: str, owner: str | None) -> Any:
    session = None
    if owner is not None:
        session = f"s-{owner}-{abs(hash(text)) % 10_000}"
        await agent.store.create_session(session, config_name="helper", owner=owner)
    return await agent.run(text, session_id=session)


async def test_the_tools_store_and_recall_per_principal(host: PluginHost) -> None:
    model = Assistant()
    store = InMemoryStore()
    async with KoboiAgent.from_dict(config(), provider=model, store=store) as agent:
        stored = await _run(agent, "remember the vault code is 4711", "alice")
        assert stored.output.startswith("tool said: remembered [")
        alice = await _run(agent, "recall vault code", "alice")
        bob = await _run(agent, "recall vault code", "bob")
        local = await _run(agent, "recall vault code", None)
    assert (
        alice.output
        == f"tool said: [{stored.output.split('[')[1].split(']')[0]}] the vault code is 4711"
    )
    assert bob.output == "tool said: nothing remembered matches"
    assert local.output == "tool said: nothing remembered matches"


async def test_proactive_memory_extracts_recalls_and_keeps_a_core_block(host: PluginHost) -> None:
    model = Assistant()
    proactive = {"enabled": True, "extract": True, "recall": True, "core_block": True}
    store = InMemoryStore()
    async with KoboiAgent.from_dict(
        config(proactive=proactive), provider=model, store=store
    ) as agent:
        first = await _run(agent, "hello, my name is Ada and I like chess", "alice")
        events = await agent.store.read(first.session_id)
        await _run(agent, "which board game should we play with chess pieces", "alice")
        await _run(agent, "which board game should we play with chess pieces", "bob")
    extracted = next(e.data for e in events if e.type == "memory.extracted")
    assert [f["text"] for f in extracted["facts"]] == [
        "The user's name is Ada.",
        "The user likes chess.",
    ]
    assert [e.data["purpose"] for e in events if e.type == J.SIDE_CALL_STARTED] == [
        "memory.extract"
    ]
    alice_later, bob_later = model.context_of(1), model.context_of(2)
    assert "Core memory (always true of this user):\n- The user's name is Ada." in alice_later
    assert any("The user likes chess." in c for c in alice_later)  # recalled by its words
    assert bob_later == []  # neither recall nor the core block leaks Alice's facts to Bob


async def test_what_was_recalled_is_journaled_and_handed_back_to_a_resumed_run(
    host: PluginHost,
) -> None:
    """The recall is journaled before it is used; a new fact stored meanwhile (by another
    session) does not change the request a resumed run sends."""
    from koboi_memory.interceptor import ProactiveMemory

    model = Assistant()
    proactive = {"enabled": True, "recall": True}
    store = InMemoryStore()
    async with KoboiAgent.from_dict(
        config(proactive=proactive), provider=model, store=store
    ) as agent:
        await _run(agent, "remember the vault code is 4711", "alice")
        interceptor = next(
            i for i in agent._require().interceptors if isinstance(i, ProactiveMemory)
        )
        session = "crashy"
        await agent.store.create_session(session, config_name="helper", owner="alice")
        result = await agent.run("tell me the vault code", session_id=session)
        events = await agent.store.read(session)
    recalled = [e.data for e in events if e.type == "memory.recalled"]
    assert recalled == [
        {"step": 1, "query": "tell me the vault code", "facts": [recalled[0]["facts"][0]]}
    ]
    assert result.outcome == "completed"
    # restore() hands the interrupted run's recall back (and a new run's marker resets it).
    from koboi import RunInfo

    info = RunInfo(session, 0, agent.config)
    await interceptor.restore([e for e in events if e.type.startswith("memory.")], info)
    assert info.state["memory.recalled"] == {"tell me the vault code": recalled[0]["facts"]}


def test_koboi_memory_lists_searches_and_forgets_per_owner(
    host: PluginHost, tmp_path: Path
) -> None:
    import anyio

    path = tmp_path / "agent.yaml"
    path.write_text(
        "agent: {name: helper}\nllm: {provider: scripted}\nstore: {url: 'sqlite:///m.db'}\n"
        "memory: {owner: me}\n",
        encoding="utf-8",
    )

    async def seed() -> None:
        from koboi.config import load_config
        from koboi_cli.api import open_store, store_target
        from koboi_memory.assembly import memory_for
        from koboi_memory.store import Scope

        loaded = load_config(path, host.catalog())
        async with open_store(store_target(path)) as store:
            memory = await memory_for(loaded, store, host)
            await memory.add(Scope("helper", "me"), "The printer is on floor two.")
            await memory.add(Scope("helper", "me"), "Lunch is at noon.", core=True)
            await memory.add(Scope("helper", "alice"), "Alice's printer is broken.")

    anyio.run(seed)
    runner = CliRunner()
    listed = runner.invoke(app, ["memory", "list", "--config", str(path), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [r["text"] for r in rows] == ["The printer is on floor two.", "Lunch is at noon."]
    assert rows[1]["core"] is True
    alice = runner.invoke(
        app, ["memory", "list", "--config", str(path), "--owner", "alice", "--json"]
    )
    assert [r["text"] for r in json.loads(alice.stdout)] == ["Alice's printer is broken."]
    found = runner.invoke(app, ["memory", "search", "printer", "--config", str(path), "--json"])
    hits = json.loads(found.stdout)
    assert [h["text"] for h in hits] == ["The printer is on floor two."] and hits[0]["score"] > 0
    shown = runner.invoke(app, ["memory", "list", "--config", str(path)])
    assert "The printer is on floor two." in shown.stdout and "ID" in shown.stdout
    forgot = runner.invoke(
        app, ["memory", "forget", rows[0]["id"], "--config", str(path), "--json"]
    )
    assert json.loads(forgot.stdout) == {"forgotten": [rows[0]["id"]], "missing": []}
    again = runner.invoke(app, ["memory", "forget", rows[0]["id"], "--config", str(path)])
    assert again.exit_code == 1 and "no remembered fact has the id" in again.output
    assert "Traceback" not in again.output
    nothing = runner.invoke(app, ["memory", "list"])
    assert nothing.exit_code == 1 and "give the agent's config: --config" in nothing.output
