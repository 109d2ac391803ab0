"""pre_compact hooks through the context plugin's compaction hook.

A test-only plugin with the id ``context`` defines exactly the hook koboi-context
defines (``koboi_context_register_compaction_hooks``) and calls the registered
hooks before each model call, as a compacting context strategy would; so this
test does not depend on koboi-context. Without the owner, koboi-hooks'
implementation waits, harmlessly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import pytest

import koboi_hooks.plugin
import koboi_scripted.plugin
from koboi import Interceptor, ModelRequest, PluginHost, RunInfo, hookimpl
from koboi.hookspecs import hookspec
from koboi.plugins import use_host

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Ran = Any
Kit = Any


class CompactionHook(Protocol):
    async def before_compaction(self, run: RunInfo, details: Mapping[str, Any]) -> str | None: ...


class RegisterCompactionHook(Protocol):
    def __call__(self, name: str, hook: CompactionHook) -> None: ...


@hookspec
def koboi_context_register_compaction_hooks(register: RegisterCompactionHook) -> None:
    """Hooks awaited before the conversation is compacted (koboi-context's definition)."""


context_specs = ModuleType("context_specs")  # what the owner publishes: a module of specs
context_specs.koboi_context_register_compaction_hooks = koboi_context_register_compaction_hooks  # type: ignore[attr-defined]


class Compactor(Interceptor):
    """Calls every registered compaction hook before each model call, keeps what they say."""

    name = "compactor"

    def __init__(self) -> None:
        self.instructions: list[str | None] = []

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        assert run.host is not None
        details = {
            "strategy": "summarise",
            "tokens_before": 900,
            "budget": 500,
            "messages_dropped": 4,
        }
        for entry in run.host.collect("koboi_context_register_compaction_hooks"):
            self.instructions.append(await entry.target.before_compaction(run, details))
        return None


COMPACTOR = Compactor()

context_plugin = SimpleNamespace(
    koboi_register_hookspecs=hookimpl(lambda register: register(context_specs)),
    koboi_register_interceptors=hookimpl(lambda register, config: register(COMPACTOR)),
)


@pytest.fixture
def host_with_context() -> Iterator[PluginHost]:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_hooks.plugin, "hooks", dist="koboi-hooks")
    host.add_plugin(context_plugin, "context", dist="koboi-context-stand-in")
    COMPACTOR.instructions.clear()
    with use_host(host):
        yield host


async def test_pre_compact_hooks_give_the_summary_extra_instructions(
    host_with_context: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    keep = ["/bin/sh", "-c", "cat > seen.json; echo 'Keep every ticket number.'"]
    hooks = {"PreCompact": [{"hooks": [{"type": "command", "command": keep}]}]}
    agent, _ = kit.make_agent(hooks, ["ok"], ran, tmp_path)
    async with agent:
        result = await agent.run("summarise please")
        events = await agent.store.read(result.session_id)
    assert COMPACTOR.instructions == ["Keep every ticket number."]
    seen = (tmp_path / "work" / "seen.json").read_text()
    assert '"hook_event_name": "PreCompact"' in seen and '"tokens_before": 900' in seen
    decision = kit.hook_events(events)[0]
    assert decision["event"] == "pre_compact" and decision["effect"] == "added instructions"


async def test_a_failing_pre_compact_hook_is_skipped_unless_closed(
    host_with_context: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    hooks = {"pre_compact": [{"command": kit.script("exit_one.sh")}]}
    agent, _ = kit.make_agent(hooks, ["ok"], ran, tmp_path)
    async with agent:
        result = await agent.run("q")
    assert result.outcome == "completed" and COMPACTOR.instructions == [None]
    hooks = {"pre_compact": [{"command": kit.script("exit_one.sh"), "on_error": "closed"}]}
    agent, _ = kit.make_agent(hooks, ["ok"], ran, tmp_path)
    async with agent:
        result = await agent.run("q")
    assert result.outcome == "failed" and "pre_compact hook" in (result.error or "")


def test_without_the_context_plugin_the_hook_waits(host: PluginHost) -> None:
    info = next(p for p in host.plugins if p.id == "hooks")
    assert "koboi_context_register_compaction_hooks" in info.waiting
