"""RAG in a real agent: rag__search with citations, context added to the model call,
events journaled, the eval check, and a byte-identical offline replay (koboi-replay)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

import koboi_replay.plugin
import koboi_store_sql.plugin
from koboi import KoboiAgent, PluginHost
from koboi.events import PluginEvent
from koboi.store import JournalEvent

from .conftest import write_docs

CONFIG: dict[str, Any] = {
    "agent": {"name": "rag-test", "system_prompt": "Answer from the documents."},
    "llm": {
        "provider": "scripted",
        "rules": [
            {
                "match": "refund",
                "tool": "rag__search",
                "arguments": {"query": "refund policy for widgets"},
                "reply": "Widgets can be returned within 30 days [1].",
            }
        ],
    },
    "store": {"url": "sqlite:///.koboi/koboi.db"},
    "rag": {
        "documents": ["guide", "notes"],
        "embedder": {"name": "lsa", "dimensions": 3},
        "top_k": 2,
    },
}


@pytest.fixture
def agent_host(host: PluginHost) -> PluginHost:
    host.add_plugin(koboi_store_sql.plugin, "store-sql", dist="koboi-store-sql")
    host.add_plugin(koboi_replay.plugin, "replay", dist="koboi-replay")
    return host


def _events(events: list[JournalEvent], kind: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.type == kind]


@pytest.mark.slow
def test_a_run_retrieves_cites_and_replays_byte_identical(
    tmp_path: Path, agent_host: PluginHost
) -> None:
    write_docs(tmp_path)
    config_path = tmp_path / "agent.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))

    async def go() -> None:
        from koboi_replay import capture_session, replay_bundle

        async with KoboiAgent.from_config(config_path, host=agent_host) as agent:
            assert "rag__search" in agent.tools
            streamed = [e async for e in agent.stream("How do refunds work?")]
            plugin_events = [e for e in streamed if isinstance(e, PluginEvent)]
            final = streamed[-1]
            result = final.result  # type: ignore[attr-defined]
            assert [e.type for e in plugin_events] == [
                "rag.retrieved",
                "rag.retrieved",
                "rag.cited",
            ]
            assert result.output == "Widgets can be returned within 30 days [1]."
            store = agent.store
            events = await store.read(result.session_id)
            kinds = [e.type for e in events if e.type.startswith("rag.")]
            assert kinds == ["rag.retrieved", "rag.retrieved", "rag.cited"]
            retrieved = _events(events, "rag.retrieved")
            assert [r["via"] for r in retrieved] == ["context", "tool"]
            assert retrieved[1]["results"][0]["source"] == "guide/refunds.txt"
            assert {"n", "source", "position", "chars", "score"} <= set(retrieved[1]["results"][0])
            cited = _events(events, "rag.cited")[0]["citations"]
            assert cited[0]["source"] == "guide/refunds.txt" and "text" not in cited[0]
            first_call = _events(events, "model_call_started")[0]
            assert first_call["rewritten_by"] == ["context"]
            added = first_call["request"]["messages"][-1]
            assert added[0] == "add" and "Retrieved context" in added[1][0]["content"]
            captured = await capture_session(
                store, result.session_id, config_path=config_path, host=agent_host
            )
        bundle_path = tmp_path / "run.koboi"
        captured.bundle.write(bundle_path)
        from koboi_replay import read_bundle

        report = await replay_bundle(read_bundle(bundle_path), host=agent_host, base_dir=tmp_path)
        assert report.identical, report.divergence

    anyio.run(go)


def test_retrieved_chunk_check_reads_the_journal(tmp_path: Path, agent_host: PluginHost) -> None:
    import koboi_eval.plugin
    from koboi.plugins import use_host
    from koboi_eval.plugin_checks import plugin_check
    from koboi_eval.trace import trace_from_journal

    agent_host.add_plugin(koboi_eval.plugin, "eval", dist="koboi-eval")
    write_docs(tmp_path)
    config = {
        **CONFIG,
        "store": {"url": "memory://"},
        "rag": {**CONFIG["rag"], "augmentation": "none"},
    }

    async def go() -> list[JournalEvent]:
        async with KoboiAgent.from_dict(config, base_dir=tmp_path, host=agent_host) as agent:
            result = await agent.run("What about a refund?")
            return list(await agent.store.read(result.session_id))

    events = anyio.run(go)
    trace = trace_from_journal(events)
    with use_host(agent_host):
        found = plugin_check("retrieved_chunk", "30 days").check(trace)
        by_source = plugin_check("retrieved_chunk", source="refunds", via="tool").check(trace)
        missed = plugin_check("retrieved_chunk", "tarball", top=1).check(trace)
    assert (found.status, by_source.status) == ("passed", "passed")
    assert missed.status == "failed" and "guide/refunds.txt#0" in missed.actual
