"""docs/ and the kernel cannot drift.

- hooks.md against hookspecs.py (every hook, its parameters, its Register protocol) and
  against the seams (every Interceptor method in order, RunInfo, ToolContext, RunHandle,
  Toolset...); its examples are loaded into a real plugin host and the complete ones run;
- events.md against journal.py: every event kind, every field of its schema with its type
  and whether it is required, examples that validate, every audit key;
- config.md against config.py: every field of every kernel section;
- plugins/testing.md against koboi-testing, plugins/cli.md against koboi_cli.api;
- plugins/writing.md's excerpts against the example plugin's files.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import typing_extensions

from koboi import hookspecs
from koboi.config import KERNEL_SECTIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HOOKS_MD = DOCS / "hooks.md"
EVENTS_MD = DOCS / "events.md"
CONFIG_MD = DOCS / "config.md"
TESTING_MD = DOCS / "plugins" / "testing.md"
CLI_MD = DOCS / "plugins" / "cli.md"
WRITING_MD = DOCS / "plugins" / "writing.md"
ARCHITECTURE_MD = DOCS / "architecture.md"
EXAMPLE_SRC = DOCS / "plugins" / "example" / "src"


# ---------------------------------------------------------------------------
# Reading markdown
# ---------------------------------------------------------------------------


def _sections(text: str, level: int) -> dict[str, str]:
    """Heading text -> body, for headings of exactly ``level`` '#' characters."""
    marks = "#" * level
    pattern = re.compile(rf"^{marks} (?P<title>.+?)\s*$", re.MULTILINE)
    found = list(pattern.finditer(_without_fences(text)))
    sections: dict[str, str] = {}
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(text)
        # A body ends at the next heading of the same or a higher level.
        body = text[match.end() : end]
        higher = re.search(rf"^#{{1,{level}}} ", _without_fences(body), re.MULTILINE)
        sections[match.group("title").strip("` ")] = body[: higher.start()] if higher else body
    return sections


def _without_fences(text: str) -> str:
    """``text`` with the lines of fenced code blocks blanked (same length), so that a
    ``# comment`` in a code block is never taken for a heading."""
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def _blocks(text: str, lang: str = "python") -> list[str]:
    return [m.group("code") for m in _FENCE.finditer(text) if m.group("lang") == lang]


def _file_of(block: str) -> str | None:
    """``pkg/mod.py`` when the block's first line is ``# pkg/mod.py``."""
    first = block.split("\n", 1)[0].strip()
    match = re.fullmatch(r"# ([\w/]+\.py)", first)
    return match.group(1) if match else None


def _table_rows(body: str) -> list[list[str]]:
    """The cells of every row of the markdown tables in ``body`` (header and rule excluded)."""
    rows: list[list[str]] = []
    for line in body.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows


def _code_text(text: str) -> str:
    """Every inline code span and code block of ``text``, joined."""
    spans = re.findall(r"`([^`\n]+)`", _FENCE.sub("", text))
    return "\n".join([*spans, *(m.group("code") for m in _FENCE.finditer(text))])


def _documented(name: str, code: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", code) is not None


# ---------------------------------------------------------------------------
# Loading the examples of a page as modules
# ---------------------------------------------------------------------------

PRELUDE = "from __future__ import annotations\n\nfrom koboi import hookimpl\n"


class DocModules:
    """The file blocks (``# pkg/mod.py``) of a page, importable while it is alive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.added: list[str] = []

    def load(self) -> DocModules:
        for block in _blocks(self.path.read_text(encoding="utf-8")):
            file = _file_of(block)
            if file is None:
                continue
            name = file.removesuffix(".py").replace("/", ".")
            self._package_of(name)
            module = types.ModuleType(name)
            module.__file__ = f"<{self.path.name}: {file}>"
            sys.modules[name] = module
            self.added.append(name)
            exec(compile(block, module.__file__, "exec"), module.__dict__)
            parent, _, leaf = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], leaf, module)
        return self

    def _package_of(self, name: str) -> None:
        parts = name.split(".")[:-1]
        for index in range(len(parts)):
            package = ".".join(parts[: index + 1])
            if package not in sys.modules:
                module = types.ModuleType(package)
                module.__path__ = []
                sys.modules[package] = module
                self.added.append(package)

    def close(self) -> None:
        for name in reversed(self.added):
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def hooks_examples() -> Iterator[DocModules]:
    modules = DocModules(HOOKS_MD).load()
    try:
        yield modules
    finally:
        modules.close()


def _plugin_module(block: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(PRELUDE + block, f"<hooks.md: {name}>", "exec"), module.__dict__)
    return module


def _bare_host() -> Any:
    import koboi_scripted.plugin
    from koboi.plugins import PluginHost

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    return host


# ---------------------------------------------------------------------------
# hooks.md: the hooks
# ---------------------------------------------------------------------------


def _hook_sections() -> dict[str, str]:
    sections = _sections(HOOKS_MD.read_text(encoding="utf-8"), 2)
    return {title: body for title, body in sections.items() if title.startswith("koboi_")}


def test_hook_names_are_the_specs() -> None:
    specs = sorted(n for n, v in vars(hookspecs).items() if n.startswith("koboi_") and callable(v))
    assert sorted(hookspecs.HOOK_NAMES) == specs
    assert specs, "no hook specs found"


def test_the_dispatch_table_is_the_specs() -> None:
    from koboi.plugins import HOOKS

    assert list(HOOKS) == list(hookspecs.HOOK_NAMES)


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_spec_has_a_docstring(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name))
    assert doc, f"hook spec {name} has no docstring"
    for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
        assert f":param {parameter}:" in doc, f"{name}: docstring does not describe {parameter!r}"


def _register_protocol(name: str) -> type[Any]:
    annotation = inspect.signature(getattr(hookspecs, name)).parameters["register"].annotation
    protocol = getattr(hookspecs, str(annotation))
    assert isinstance(protocol, type), f"{name}: register is annotated {annotation!r}"
    return protocol


def _protocol_parameters(protocol: type[Any]) -> set[str]:
    # An overloaded __call__ (RegisterTool) is only a dummy on the class: its overloads
    # are kept by typing, under the method's qualified name.
    registry = getattr(typing, "_overload_registry", {})
    overloads = registry.get(protocol.__module__, {}).get(f"{protocol.__qualname__}.__call__", {})
    functions = list(overloads.values()) or [protocol.__call__]  # type: ignore[operator]
    signatures = [inspect.signature(f) for f in functions]
    return {
        p
        for s in signatures
        for p, param in s.parameters.items()
        if p != "self" and param.kind is not param.VAR_KEYWORD
    }


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_spec_is_documented(name: str) -> None:
    sections = _hook_sections()
    assert name in sections, f"docs/hooks.md has no '## {name}' section"
    body = sections[name]
    for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
        assert re.search(rf"\b{re.escape(parameter)}\b", body), (
            f"docs/hooks.md '## {name}' does not mention the parameter {parameter!r}"
        )
    assert "register(" in body, f"docs/hooks.md '## {name}' does not show the register(...) call"
    assert "@hookimpl" in body, f"docs/hooks.md '## {name}' has no example"
    protocol = _register_protocol(name)
    assert f"`{protocol.__name__}`" in body or protocol.__name__ in body, (
        f"docs/hooks.md '## {name}' does not name the protocol {protocol.__name__}"
    )
    for parameter in _protocol_parameters(protocol):
        assert re.search(rf"\b{re.escape(parameter)}\b", body), (
            f"docs/hooks.md '## {name}' does not describe register's {parameter!r}"
        )
    assert "When:" in body and "rrors" in body, (
        f"docs/hooks.md '## {name}' must say when it is called and what fails"
    )


def test_no_documented_hook_is_missing_from_the_kernel() -> None:
    unknown = sorted(set(_hook_sections()) - set(hookspecs.HOOK_NAMES))
    assert not unknown, f"docs/hooks.md documents hooks the kernel does not define: {unknown}"


_REGISTRY_OF = {
    "koboi_register_hints": "hints",
    "koboi_register_config_sections": "sections",
    "koboi_register_providers": "providers",
    "koboi_register_tools": "tools",
    "koboi_register_toolsets": "toolsets",
    "koboi_register_sandboxes": "sandboxes",
    "koboi_register_stores": "stores",
    "koboi_register_runners": "runners",
    "koboi_register_commands": "commands",
    "koboi_register_run_sources": "run_sources",
    "koboi_register_event_summaries": "event_summaries",
}


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_the_hook_example_is_accepted_by_a_real_host(name: str, hooks_examples: DocModules) -> None:
    """The section's @hookimpl block, as a plugin: it loads, and registers something."""
    from koboi.config import validate_config

    body = _hook_sections()[name]
    plugin_blocks = [b for b in _blocks(body) if "@hookimpl" in b and _file_of(b) is None]
    assert plugin_blocks, f"'## {name}' has no plugin block"
    for index, block in enumerate(plugin_blocks):
        owned = re.findall(r"\bkoboi_(?!register_)([a-z0-9]+)_register_\w+", body)
        plugin_id = owned[0] if owned else "example"
        module = _plugin_module(block, f"doc_plugin_{name}_{index}")
        host = _bare_host()
        host.add_plugin(module, plugin_id)
        host.load()
        info = host.get(plugin_id)
        assert info is not None and info.status == "loaded", info
        assert name in info.hooks
        if name == "koboi_register_hookspecs":
            assert info.defines, "the example defines no hook"
            continue
        catalog = host.catalog()
        if name == "koboi_register_interceptors":
            config = validate_config({"llm": {"provider": "scripted"}}, catalog)
            host.interceptors(config)
            continue
        registry = catalog.registries()[_REGISTRY_OF[name]]
        assert registry.by_plugin(plugin_id), f"the example of {name} registers nothing"


def test_every_python_block_of_hooks_md_compiles() -> None:
    for block in _blocks(HOOKS_MD.read_text(encoding="utf-8")):
        source = block if block.startswith("from __future__") else PRELUDE + block
        compile(source, "<hooks.md>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


# ---------------------------------------------------------------------------
# hooks.md: the seams
# ---------------------------------------------------------------------------


def _interceptor_methods() -> list[str]:
    from koboi.interceptors import Interceptor

    return [
        n for n, v in vars(Interceptor).items() if not n.startswith("_") and inspect.isfunction(v)
    ]


def test_interceptor_methods_are_documented_in_calling_order() -> None:
    text = HOOKS_MD.read_text(encoding="utf-8")
    body = _sections(text, 3)["The methods"]
    documented = [m.group(1) for row in _table_rows(body) if (m := re.match(r"`(\w+)\(", row[0]))]
    # Interceptor defines its methods in the order the kernel calls them.
    assert documented == _interceptor_methods()
    for word in ("priority", "Verdict", "skip_approval", "arguments", "Refusal", "FinishDecision"):
        assert word in text


def _public_members(cls: type[Any]) -> set[str]:
    names = {n for n in vars(cls) if not n.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    return names


def _seam_classes() -> list[type[Any]]:
    from koboi.interceptors import (
        FinishDecision,
        Interceptor,
        PendingToolCall,
        Refusal,
        RunInfo,
        Verdict,
    )
    from koboi.runners import Ending, RunHandle, Runner
    from koboi.sandbox import Sandbox, SandboxProcess
    from koboi.tools import Tool, ToolContext
    from koboi.toolsets import Toolset
    from koboi.tracing import TraceContext

    return [
        Interceptor,
        RunInfo,
        PendingToolCall,
        Verdict,
        Refusal,
        FinishDecision,
        Toolset,
        Runner,
        RunHandle,
        Ending,
        ToolContext,
        Tool,
        Sandbox,
        SandboxProcess,
        TraceContext,
    ]


@pytest.mark.parametrize("cls", _seam_classes(), ids=lambda c: c.__name__)
def test_every_member_of_a_seam_is_documented(cls: type[Any]) -> None:
    code = _code_text(HOOKS_MD.read_text(encoding="utf-8"))
    assert _documented(cls.__name__, code), f"docs/hooks.md never names {cls.__name__}"
    missing = sorted(n for n in _public_members(cls) if not _documented(n, code))
    assert not missing, f"docs/hooks.md does not document {cls.__name__}: {missing}"


def test_the_events_of_the_stream_are_documented() -> None:
    from koboi import events

    code = _code_text(HOOKS_MD.read_text(encoding="utf-8"))
    for cls in typing.get_args(events.AgentEvent):
        assert _documented(cls.__name__, code), cls
        kind = cls.__dataclass_fields__["kind"].default
        assert _documented(kind, code), f"{cls.__name__}.kind {kind!r}"
        missing = [f.name for f in dataclasses.fields(cls) if not _documented(f.name, code)]
        assert not missing, f"docs/hooks.md does not document {cls.__name__}: {missing}"
    for outcome in typing.get_args(events.Outcome):
        assert outcome in EVENTS_MD.read_text(encoding="utf-8"), outcome


def test_the_plugin_host_api_is_documented() -> None:
    from koboi import plugins, store

    code = _code_text(HOOKS_MD.read_text(encoding="utf-8"))
    for name in (
        "collect",
        "hook_owner",
        "implementers",
        "default_host",
        "registered_hooks",
        "hook_namespace",
        "HOOKS",
        "defines",
        "waiting",
    ):
        assert _documented(name, code), name
    for name in ("capability", "records_of", "jobs_of", "cache_of", "capabilities_of", "unwrap"):
        assert hasattr(store, name) and _documented(name, code), name
    assert hasattr(plugins, "use_host")


# ---------------------------------------------------------------------------
# hooks.md: the complete examples, run
# ---------------------------------------------------------------------------


def _agent(
    turns: Sequence[Any], *, host: Any = None, config: dict[str, Any] | None = None, **kw: Any
) -> Any:
    from koboi import KoboiAgent
    from koboi.store import InMemoryStore
    from koboi_testing.models import InOrderModel

    raw = {"llm": {"provider": "scripted"}, "agent": {"stream": False}, **(config or {})}
    kw.setdefault("store", InMemoryStore())
    return KoboiAgent.from_dict(
        raw, host=host or _bare_host(), provider=InOrderModel(list(turns)), **kw
    )


@pytest.mark.anyio
async def test_the_notes_example_restores_refuses_rewrites_and_continues(
    hooks_examples: DocModules,
) -> None:
    from koboi import journal as J

    notes = sys.modules["koboi_notes.notes"]
    turns = [
        {"name": "save_note", "arguments": {"text": "  buy milk "}},
        "Saved.",
        "You have a note about milk.",
    ]
    agent = _agent(turns, extra_tools=[notes.save_note], interceptors=[notes.Notes()])
    async with agent:
        first = await agent.run("Remember to buy milk.")
        second = await agent.run("What should I buy?", session_id=first.session_id)
        refused = await agent.run("  ", session_id=first.session_id)
        events = await agent.store.read(first.session_id)
    assert first.outcome == second.outcome == "completed"
    saved = [e.data for e in events if e.type == "notes.saved"]
    assert saved == [{"text": "buy milk"}]  # trimmed by the rewrite
    started = next(e for e in events if e.type == J.TOOL_CALL_STARTED)
    assert J.TOOL_CALL_STARTED.of(started)["rewritten_by"] == ["notes"]
    calls = [J.MODEL_CALL_STARTED.of(e) for e in events if e.type == J.MODEL_CALL_STARTED]
    assert calls[-1].get("rewritten_by") == ["context"]
    assert refused.outcome == "refused" and refused.refused_by == "notes"


@pytest.mark.anyio
async def test_the_verdict_examples_rewrite_admit_and_redact(hooks_examples: DocModules) -> None:
    from koboi import journal as J
    from koboi import tool

    guards = sys.modules["koboi_guards.interceptors"]

    @tool(idempotent=True, thread=False)
    def read(path: str) -> str:
        """Read."""
        return f"SECRET of {path}"

    turns = [
        {"name": "read", "arguments": {"path": "/work/a.txt"}},
        {"name": "read", "arguments": {"path": "b.txt"}},
        "done",
    ]
    icps = [guards.CallBudget(1), guards.RelativePaths("/work"), guards.Redact()]
    agent = _agent(turns, extra_tools=[read], interceptors=icps)
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    finished = [J.TOOL_CALL_FINISHED.of(e) for e in events if e.type == J.TOOL_CALL_FINISHED]
    assert [f["content"] for f in finished] == ["[redacted] of a.txt"]
    refused = [J.TOOL_CALL_REFUSED.of(e) for e in events if e.type == J.TOOL_CALL_REFUSED]
    assert [r["stage"] for r in refused] == ["budget"]


@pytest.mark.anyio
async def test_the_summary_example_makes_a_journaled_side_call(hooks_examples: DocModules) -> None:
    from koboi import journal as J

    summary = sys.modules["koboi_summary.interceptor"]
    agent = _agent(
        ["hi", "a summary", "the answer"],
        interceptors=[summary.Summarise(keep=1, longer_than=2)],
        config={"agent": {"stream": False, "system_prompt": "Be brief."}},
    )
    async with agent:
        first = await agent.run("hello")
        result = await agent.run("and now?", session_id=first.session_id)
        events = await agent.store.read(result.session_id)
    assert result.output == "the answer"
    finished = [J.SIDE_CALL_FINISHED.of(e) for e in events if e.type == J.SIDE_CALL_FINISHED]
    assert [f["purpose"] for f in finished] == ["summary"]


@pytest.mark.anyio
async def test_the_toolset_example_offers_and_changes_tools(hooks_examples: DocModules) -> None:
    from koboi import journal as J

    block = next(
        b for b in _blocks(_hook_sections()["koboi_register_toolsets"]) if "@hookimpl" in b
    )
    host = _bare_host()
    host.add_plugin(_plugin_module(block, "doc_greeters"), "greeters")
    agent = _agent(
        [{"name": "greet__ada", "arguments": {}}, "done", "again"],
        host=host,
        config={"greeters": {"people": ["Ada"]}},
    )
    async with agent:
        assert list(agent.tools) == ["greet__ada"]  # in the toolset's namespace
        result = await agent.run("greet")
        toolset = agent._parts.toolsets[0]  # the opened Greeters
        toolset.add("Grace")
        again = await agent.run("more", session_id=result.session_id)
        events = await agent.store.read(result.session_id)
    assert again.outcome == "completed"
    finished = [
        J.TOOL_CALL_FINISHED.of(e)["content"] for e in events if e.type == J.TOOL_CALL_FINISHED
    ]
    assert finished == ["Hello, Ada!"]
    changed = [J.TOOLS_CHANGED.of(e) for e in events if e.type == J.TOOLS_CHANGED]
    assert changed and changed[0]["added"] == ["greet__grace"]


@pytest.mark.anyio
async def test_the_runner_example_reviews_once(hooks_examples: DocModules) -> None:
    from koboi import journal as J

    review = sys.modules["koboi_review.runner"]
    agent = _agent(["draft", "final"], runner=review.Review(rounds=1))
    async with agent:
        result = await agent.run("write")
        events = await agent.store.read(result.session_id)
    assert result.output == "final"
    types_ = [e.type for e in events]
    assert J.RUN_CONTINUED in types_ and "review.round" in types_
    assert J.RUN_STARTED.of(events[0])["runner"] == "review"


@pytest.mark.anyio
async def test_the_pause_example_suspends_and_resumes(hooks_examples: DocModules) -> None:
    ask = sys.modules["koboi_ask.tools"]
    turns = [{"name": "ask_user", "arguments": {"question": "When?"}}, "Booked."]
    agent = _agent(turns, extra_tools=[ask.ask_user])
    async with agent:
        result = await agent.run("Book me a table.")
        assert result.outcome == "suspended"
        assert result.suspension["data"]["question"] == "When?"
        result = await agent.resume_run(result.session_id, reply="Friday, 8 pm")
        events = await agent.store.read(result.session_id)
    assert result.outcome == "completed"
    finished = [e.data["content"] for e in events if e.type == "tool_call_finished"]
    assert finished == ["the user answered: Friday, 8 pm"]


@pytest.mark.anyio
async def test_the_open_process_example_round_trips(
    hooks_examples: DocModules, koboi_tool_context: Any
) -> None:
    echo = sys.modules["koboi_echo.tools"].echo_twice
    result = await echo(echo.parse_arguments({"text": "hi"}), koboi_tool_context)
    assert result.content == "hi hi", result


@pytest.mark.anyio
async def test_the_progress_example_streams_live(hooks_examples: DocModules) -> None:
    from koboi.events import PluginEvent, ToolResultEvent

    count_to = sys.modules["koboi_progress.tools"].count_to
    agent = _agent([{"name": "count_to", "arguments": {"n": 3}}, "done"], extra_tools=[count_to])
    async with agent:
        events = [e async for e in agent.stream("count")]
    kinds = [type(e).__name__ for e in events if isinstance(e, PluginEvent | ToolResultEvent)]
    assert kinds == ["PluginEvent"] * 3 + ["ToolResultEvent"]
    ticks = [e for e in events if isinstance(e, PluginEvent)]
    assert ticks[0].event_id is None and ticks[0].call_id is not None


@pytest.mark.anyio
async def test_the_store_needs_example_is_refused_by_a_journal_only_store(
    hooks_examples: DocModules,
) -> None:
    from koboi.errors import MissingCapability
    from koboi.store import InMemoryStore, Store

    remember = sys.modules["koboi_remember.interceptor"]

    def delegate(method: str) -> Any:
        return lambda self, *a, **k: getattr(self.inner, method)(*a, **k)

    journal_only = type(
        "JournalOnly",
        (Store,),
        {"name": "journal-only", **{m: delegate(m) for m in Store.__abstractmethods__}},
    )
    store = journal_only()
    store.inner = InMemoryStore()
    agent = _agent([], store=store, interceptors=[remember.Remember()])
    with pytest.raises(MissingCapability, match=r"remembered facts .* of plugin 'remember'"):
        await agent.open()
    memory = InMemoryStore()
    await memory.record_put("remember", "anyone", {"text": "tea, no sugar"})
    agent = _agent(["ok"], store=memory, interceptors=[remember.Remember()])
    async with agent:
        result = await agent.run("hi")
        events = await agent.store.read(result.session_id)
    assert events[1].data.get("rewritten_by") == ["context"]


# ---------------------------------------------------------------------------
# events.md
# ---------------------------------------------------------------------------


def _type_text(annotation: Any) -> str:
    """How events.md writes a schema type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.NotRequired:
        return _type_text(args[0])
    if annotation is typing.Any:
        return "any JSON"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in simple:
        return simple[annotation]
    if annotation is type(None):
        return "null"
    if origin is dict:
        return "object"
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in args)
    if typing_extensions.is_typeddict(annotation):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    raise AssertionError(f"no rendering for {annotation!r}")


def _required(annotation: Any) -> bool:
    # Not schema.__required_keys__: with postponed annotations it lists every key.
    return typing.get_origin(annotation) is not typing.NotRequired


def _nested_schemas() -> list[type[Any]]:
    from koboi import journal as J

    return [J.TraceData, J.DirectCallData, J.DecisionData, J.SuspensionData, J.ToolDefinitionData]


def _events_sections() -> tuple[dict[str, str], dict[str, str]]:
    text = EVENTS_MD.read_text(encoding="utf-8")
    top = _sections(text, 2)
    return _sections(top["Kernel events"], 3), _sections(top["Records inside events"], 3)


def test_events_md_documents_exactly_the_kernel_event_kinds() -> None:
    from koboi import journal as J

    kinds, records = _events_sections()
    assert list(kinds) == list(J.EVENT_TYPES), "events.md: kinds missing, extra or out of order"
    assert sorted(records) == sorted(s.__name__ for s in _nested_schemas())


def _schema_cases() -> list[tuple[str, Any]]:
    from koboi import journal as J

    return [(str(k), k.schema) for k in J.EVENT_KINDS] + [
        (s.__name__, s) for s in _nested_schemas()
    ]


@pytest.mark.parametrize(("title", "schema"), _schema_cases(), ids=lambda v: str(v)[:40])
def test_events_md_documents_every_field_of_the_schema(title: str, schema: Any) -> None:
    kinds, records = _events_sections()
    body = {**kinds, **records}[title]
    hints = typing.get_type_hints(schema, include_extras=True)
    rows = {m.group(1): row for row in _table_rows(body) if (m := re.fullmatch(r"`(\w+)`", row[0]))}
    assert set(rows) == set(hints), (
        f"events.md '{title}': documented {sorted(rows)}, schema has {sorted(hints)}"
    )
    for field, annotation in hints.items():
        row = rows[field]
        assert len(row) == 4 and row[3], (
            f"events.md '{title}.{field}': field | type | required | meaning"
        )
        assert row[1] == _type_text(annotation), (
            f"events.md '{title}.{field}': type {row[1]!r}, the schema says {_type_text(annotation)!r}"
        )
        assert row[2] == ("yes" if _required(annotation) else "no"), (
            f"events.md '{title}.{field}': required is {row[2]!r}"
        )


@pytest.mark.parametrize(("title", "schema"), _schema_cases(), ids=lambda v: str(v)[:40])
def test_events_md_examples_validate_against_the_schema(title: str, schema: Any) -> None:
    from pydantic import TypeAdapter

    kinds, records = _events_sections()
    body = {**kinds, **records}[title]
    examples = _blocks(body, "json")
    assert examples, f"events.md '{title}' has no example"
    adapter = TypeAdapter(schema)
    known = set(typing.get_type_hints(schema))
    for text in examples:
        data = json.loads(text)
        adapter.validate_python(data, strict=False)
        extra = set(data) - known
        if title != "provider_event":  # its reporters' details are keys of their own
            assert not extra, (
                f"events.md '{title}': the example has keys outside the schema: {extra}"
            )


def test_events_md_documents_every_audit_key() -> None:
    from koboi import journal as J

    body = _sections(EVENTS_MD.read_text(encoding="utf-8"), 2)["Audit records"]
    documented = {
        m.group(1) for row in _table_rows(body) if (m := re.fullmatch(r"`(\w+)`", row[0]))
    }
    assert documented == set(J.AUDIT_FIELDS)


@pytest.mark.anyio
async def test_the_reading_example_of_events_md_runs() -> None:
    from koboi import journal as J
    from koboi import tool

    block = next(b for b in _blocks(EVENTS_MD.read_text(encoding="utf-8")) if "def describe" in b)
    namespace: dict[str, Any] = {}
    exec(compile(block, "<events.md>", "exec"), namespace)
    describe = namespace["describe"]

    @tool(thread=False)
    def note(text: str) -> str:
        """Note."""
        return "ok"

    agent = _agent([{"name": "note", "arguments": {"text": "x"}}, "done"], extra_tools=[note])
    async with agent:
        result = await agent.run("go")
        events = await agent.store.read(result.session_id)
    lines = [describe(e) for e in events]
    assert lines[0] == J.RUN_STARTED.summary
    assert "note runs (no stage spoke)" in lines
    assert lines[-1] == "run ended completed"


# ---------------------------------------------------------------------------
# config.md
# ---------------------------------------------------------------------------

KERNEL_FIELDS = [
    (section, field) for section, model in KERNEL_SECTIONS.items() for field in model.model_fields
]


@pytest.mark.parametrize(("section", "field"), KERNEL_FIELDS)
def test_kernel_config_field_has_a_description(section: str, field: str) -> None:
    info = KERNEL_SECTIONS[section].model_fields[field]
    assert info.description, f"{section}.{field} has no description"


@pytest.mark.parametrize(("section", "field"), KERNEL_FIELDS)
def test_kernel_config_field_is_in_config_md(section: str, field: str) -> None:
    sections = _sections(CONFIG_MD.read_text(encoding="utf-8"), 3)
    assert section in sections, f"docs/config.md has no '### `{section}`' section"
    assert f"`{field}`" in sections[section], (
        f"docs/config.md '### `{section}`' does not document the field {field!r}"
    )


def test_config_md_names_every_kernel_section() -> None:
    text = CONFIG_MD.read_text(encoding="utf-8")
    intro = text.split("## Kernel sections", 1)[0]
    for section in KERNEL_SECTIONS:
        assert f"`{section}`" in intro, f"config.md's introduction does not list `{section}`"


# ---------------------------------------------------------------------------
# plugins/testing.md
# ---------------------------------------------------------------------------


def _write_file_blocks(page: Path, root: Path) -> list[Path]:
    """Write the file blocks of ``page`` under ``root``; return the files written."""
    written = []
    for block in _blocks(page.read_text(encoding="utf-8")):
        file = _file_of(block)
        if file is None:
            continue
        target = root / file
        target.parent.mkdir(parents=True, exist_ok=True)
        for parent in target.relative_to(root).parents:
            if str(parent) not in (".", "tests"):
                (root / parent / "__init__.py").touch()
        target.write_text(block, encoding="utf-8")
        written.append(target)
    return written


def test_the_test_files_of_testing_md_pass_with_pytest(tmp_path: Path) -> None:
    """testing.md's ``# tests/...`` blocks, as a plugin's test directory, against the
    modules of hooks.md's examples: a real pytest run, with koboi-testing's plugin."""
    import os
    import subprocess

    _write_file_blocks(HOOKS_MD, tmp_path)
    tests = [p for p in _write_file_blocks(TESTING_MD, tmp_path) if p.parts[-2] == "tests"]
    assert len(tests) >= 5, tests
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(EXAMPLE_SRC)])}
    env.pop("KOBOI_STRICT_PLUGINS", None)  # koboi-testing must set it
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


def test_testing_md_documents_every_fixture_and_suite() -> None:
    import koboi_testing.contracts as contracts
    import koboi_testing.pytest_plugin as plugin

    text = TESTING_MD.read_text(encoding="utf-8")
    fixtures = [
        n
        for n, v in vars(plugin).items()
        if getattr(v, "_pytestfixturefunction", None)
        or (type(v).__name__ == "FixtureFunctionDefinition")
    ]
    assert {"anyio_backend", "koboi_tool_context", "memory_store", "koboi_command"} <= set(fixtures)
    fixture_rows = {row[0].strip("`") for row in _table_rows(_sections(text, 2)["Fixtures"])}
    assert set(fixtures) <= fixture_rows, (
        f"testing.md: fixtures missing: {set(fixtures) - fixture_rows}"
    )
    suites = [n for n in contracts.__all__ if n.endswith("Contract")]
    documented = _sections(_sections(text, 2)["Contract suites"], 3)
    assert sorted(documented) == sorted(suites), "testing.md: one '### `XContract`' per suite"
    code = _code_text(text)
    for name in contracts.__all__:
        assert _documented(name, code), f"testing.md does not mention {name}"
    for name in ("InOrderModel", "WireServer", "Reply", "use_host", "KOBOI_STRICT_PLUGINS"):
        assert _documented(name, code), name


# ---------------------------------------------------------------------------
# plugins/cli.md
# ---------------------------------------------------------------------------


def test_cli_md_documents_the_whole_api() -> None:
    from koboi_cli import api

    rows = _table_rows(
        _sections(CLI_MD.read_text(encoding="utf-8"), 2)["What a command may use: koboi_cli.api"]
    )
    documented = " ".join(row[0] for row in rows)
    missing = [name for name in api.__all__ if not _documented(name, documented)]
    assert not missing, f"cli.md's table of koboi_cli.api misses {missing}"


@pytest.fixture
def weather_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example plugin importable, and cli.md's command module as its ``cli``."""
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    import koboi_example_weather  # the real package: cli.md's module joins it

    modules = DocModules(CLI_MD).load()
    try:
        yield koboi_example_weather
    finally:
        modules.close()


def test_the_command_of_cli_md_runs_through_the_real_cli(weather_cli: Any, tmp_path: Path) -> None:
    import anyio
    from typer.testing import CliRunner

    import koboi_scripted.plugin
    import koboi_store_sql.plugin
    from koboi import KoboiAgent, PluginHost
    from koboi.plugins import use_host
    from koboi_cli.app import app

    text = CLI_MD.read_text(encoding="utf-8")
    register = next(b for b in _blocks(text) if "koboi_register_commands" in b and "@hookimpl" in b)
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    host.add_plugin(koboi_store_sql.plugin, "store-sql")
    import koboi_example_weather.plugin

    host.add_plugin(koboi_example_weather.plugin, "weather")
    host.add_plugin(_plugin_module(register, "doc_weather_cli"), "weather-cli")
    config = tmp_path / "agent.yaml"
    config.write_text(
        "llm:\n  provider: scripted\n  rules:\n"
        "    - match: 'weather in (?P<city>\\w+)'\n      tool: weather_forecast\n"
        "      arguments: {city: '{city}'}\n      reply: 'Forecast: {result}'\n"
        "tools:\n  builtin: [weather_forecast]\n"
        "weather:\n  stations: {Paris: 21.5}\n"
        "store:\n  url: sqlite:///.koboi/koboi.db\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    with use_host(host):
        shown = runner.invoke(app, ["weather", "stations", str(config), "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout) == {"Paris": 21.5, "Tokyo": 22.5, "Reykjavik": 4.0}

        async def run() -> None:
            async with KoboiAgent.from_config(config, host=host) as agent:
                await agent.run("weather in Paris")

        anyio.run(run)
        shown = runner.invoke(
            app, ["weather", "reported", "last", "--config", str(config), "--json"]
        )
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout) == [{"city": "Paris", "celsius": 21.5}]
        failed = runner.invoke(app, ["weather", "reported", "nope", "--config", str(config)])
        assert failed.exit_code == 1
        assert failed.stderr.strip() == "error: no session id starts with 'nope'"
        listed = runner.invoke(app, ["--help"])
        assert "The offline weather table. [plugin: weather-cli]" in listed.stdout


# ---------------------------------------------------------------------------
# plugins/writing.md: its excerpts are the example plugin's code
# ---------------------------------------------------------------------------


def _excerpts() -> list[tuple[str, str]]:
    found = []
    for block in _blocks(WRITING_MD.read_text(encoding="utf-8")):
        file = _file_of(block)
        if file is not None:
            found.append((file, block.split("\n", 1)[1]))
    return found


def test_writing_md_quotes_every_part_of_the_example() -> None:
    quoted = {file for file, _ in _excerpts()}
    package = EXAMPLE_SRC / "koboi_example_weather"
    for module in (
        "plugin",
        "hookspecs",
        "config",
        "stations",
        "tools",
        "memory",
        "guide",
        "briefing",
    ):
        assert f"src/koboi_example_weather/{module}.py" in quoted, module
        assert (package / f"{module}.py").is_file()


@pytest.mark.parametrize(("file", "excerpt"), _excerpts(), ids=lambda v: str(v)[:40])
def test_writing_md_excerpt_is_in_the_example(file: str, excerpt: str) -> None:
    """Every line of the excerpt is a line of the file, in the same order."""
    source = (EXAMPLE_SRC.parent / file).read_text(encoding="utf-8").splitlines()
    position = 0
    for line in excerpt.splitlines():
        if not line.strip():
            continue
        try:
            position = source.index(line, position) + 1
        except ValueError:
            raise AssertionError(
                f"writing.md quotes {file} with a line it does not have: {line!r}"
            ) from None


def test_the_example_readme_describes_every_setting() -> None:
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        from koboi_example_weather.config import WeatherSettings
    finally:
        sys.path.remove(str(EXAMPLE_SRC))
    readme = (DOCS / "plugins" / "example" / "README.md").read_text(encoding="utf-8")
    for field in WeatherSettings.model_fields:
        assert f"`{field}`" in readme, f"the example's README does not describe weather.{field}"
    for thing in (
        "koboi_weather_register_stations",
        "weather.forecast",
        "weather_stations",
        "briefing",
        "weather.briefed",
        "weather.city",
    ):
        assert thing in readme, thing


# ---------------------------------------------------------------------------
# Links between the pages
# ---------------------------------------------------------------------------

OWNED_PAGES = [
    HOOKS_MD,
    EVENTS_MD,
    CONFIG_MD,
    ARCHITECTURE_MD,
    TESTING_MD,
    CLI_MD,
    WRITING_MD,
    DOCS / "governance.md",
    DOCS / "plugins" / "example" / "README.md",
]


def _anchor(title: str) -> str:
    """The anchor a heading gets on GitHub."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", OWNED_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_link_of_the_page_leads_somewhere(page: Path) -> None:
    text = _without_fences(page.read_text(encoding="utf-8"))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: link to a missing file {target}"
        if anchor and linked.suffix == ".md":
            headings = re.findall(
                r"^#+ (.+?)\s*$", _without_fences(linked.read_text(encoding="utf-8")), re.M
            )
            assert anchor in {_anchor(h) for h in headings}, f"{page.name}: no heading for {target}"


@pytest.mark.parametrize("page", OWNED_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_of_the_page_compiles(page: Path) -> None:
    for block in _blocks(page.read_text(encoding="utf-8")):
        if _file_of(block) is not None:
            block = block.split("\n", 1)[1]  # an excerpt may be indented: its file header is not
        source = textwrap.dedent(block)
        if "@hookimpl" in source and "import hookimpl" not in source:
            source = PRELUDE + source
        compile(source, f"<{page.name}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
