"""Every kernel hook: its dispatch, its typed register, and a test of its own.

The meta-tests at the end hold the rules of docs/hooks.md: every hook has a
registrar in the kernel's one table, a ``Register*`` protocol for its
``register``, a docstring, and a test named ``test_<hook>`` in this file.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from koboi import KoboiAgent, hookimpl, hookspecs, tool
from koboi.config import validate_config
from koboi.errors import ConfigError, KoboiError, PluginError
from koboi.interceptors import Interceptor
from koboi.plugins import CATALOG_HOOKS, HOOKS, PluginHost, hook_namespace, reserved_id
from koboi.runners import LoopRunner, RunHandle, Runner
from koboi.sandbox import PassthroughSandbox
from koboi.store import InMemoryStore
from koboi.toolsets import Toolset, ToolsetContext
from koboi_testing.models import InOrderModel

pytestmark = pytest.mark.anyio


class AnyModel:
    """Registers the provider name the tests' configs use (``x``)."""

    @hookimpl
    def koboi_register_providers(self, register: Callable[..., None]) -> None:
        register("x", lambda options: InOrderModel(["unused"]))


def bare_host(*plugins: tuple[object, str]) -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=False)
    host.add_plugin(AnyModel(), "any-model")
    for plugin, name in plugins:
        host.add_plugin(plugin, name)
    return host


@tool(risk="safe", idempotent=True, thread=False)
def echo(text: str) -> str:
    """Repeat the text."""
    return text


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: int = 1


# -- one test per hook -----------------------------------------------------------------


def test_koboi_register_hookspecs() -> None:
    class Specs:
        @hookspecs.hookspec
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            """Register things."""

    class Owner:
        @hookimpl
        def koboi_register_hookspecs(self, register: Callable[..., None]) -> None:
            register(Specs)

    class Implementer:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            register("thing", 42, description="the answer")

    host = bare_host((Implementer(), "user"), (Owner(), "owner"))
    things = host.collect("koboi_owner_register_things", kind="thing")
    (entry,) = list(things)
    assert (entry.name, entry.target, entry.plugin, entry.description) == (
        "thing",
        42,
        "user",
        "the answer",
    )
    assert host.get("owner").defines == ["koboi_owner_register_things"]  # type: ignore[union-attr]
    assert host.hook_owner("koboi_owner_register_things") == "owner"
    assert host.implementers("koboi_owner_register_things") == ["user"]
    assert hook_namespace("tools-web") == "koboi_tools_web_"


def test_koboi_register_hints() -> None:
    class Hints:
        @hookimpl
        def koboi_register_hints(self, register: Callable[..., None]) -> None:
            register("section", "weather", "koboi-weather")
            register("section", "forecast", "koboi-weather", moved_to="weather.forecast")
            register("tool", "rain_gauge", "koboi-weather")
            register("sandbox", "jail", "koboi-jail", isolating=True)
            register("sandbox", "loose", "koboi-loose")

    catalog = bare_host((Hints(), "hints")).catalog()
    assert catalog.hint("section", "weather") == "install koboi-weather"
    # Both sandboxes have install hints; only the isolating one is suggested for isolation.
    assert catalog.hint("sandbox", "loose") == "install koboi-loose"
    assert catalog.hints.isolating_sandboxes() == {"jail": "koboi-jail"}
    assert catalog.hints.moved_to("forecast") == "weather.forecast"
    with pytest.raises(ConfigError) as raised:
        validate_config(
            {
                "llm": {"provider": "x"},
                "weather": {},
                "forecast": {},
                "tools": {"builtin": ["rain_gauge"]},
            },
            catalog,
        )
    text = str(raised.value)
    assert "weather: no installed plugin owns this section (install koboi-weather)" in text
    assert "forecast: not a top-level section (write it as 'weather.forecast' (install" in text
    assert "unknown tool 'rain_gauge' (install koboi-weather" in text


def test_a_command_hint_names_who_adds_a_command() -> None:
    """The kernel only keeps ``command`` hints; the CLI names them for a command that
    no installed plugin adds (packages/koboi-cli tests that side)."""

    class CommandHint:
        @hookimpl
        def koboi_register_hints(self, register: Callable[..., None]) -> None:
            register("command", "forecast", "koboi-weather")

    hints = bare_host((CommandHint(), "hints")).catalog().hints
    assert hints.distribution("command", "forecast") == "koboi-weather"
    assert hints.names("command") == {"forecast": "koboi-weather"}

    class BadKind:
        @hookimpl
        def koboi_register_hints(self, register: Callable[..., None]) -> None:
            register("subcommand", "forecast", "koboi-weather")

    host = bare_host((BadKind(), "bad"))
    host.catalog()
    info = host.get("bad")
    assert info is not None and info.status == "failed"
    assert "hint kind 'subcommand' is not one of" in info.reason and "command" in info.reason


async def test_a_stage_hint_names_who_enforces_what_a_config_needs() -> None:
    """The kernel names what is missing (a plugin enforcing the ``mode`` stage); which
    distribution provides one comes from a ``stage`` hint, never from the kernel."""

    class StageHint:
        @hookimpl
        def koboi_register_hints(self, register: Callable[..., None]) -> None:
            register("stage", "mode", "koboi-modekeeper")

    chat = {"llm": {"provider": "x"}, "agent": {"mode": "chat"}, "store": {"url": "memory://"}}
    with pytest.raises(KoboiError) as hinted:
        await KoboiAgent.from_dict(chat, host=bare_host((StageHint(), "hints"))).open()
    assert "no installed plugin enforces modes (install koboi-modekeeper, or check" in str(
        hinted.value
    )
    with pytest.raises(KoboiError) as unhinted:
        await KoboiAgent.from_dict(chat, host=bare_host()).open()
    assert "(install a plugin that does, or check" in str(unhinted.value)
    assert "governance" not in str(unhinted.value)

    class Modes(Interceptor):
        name = "modes"
        enforces = frozenset({"mode"})

    # Control: an interceptor enforcing the stage lets the same config open.
    async with KoboiAgent.from_dict(
        chat, host=bare_host((StageHint(), "hints")), interceptors=[Modes()]
    ) as agent:
        assert agent.config.agent.mode == "chat"


def test_the_kernel_names_no_capability_when_it_asks_for_a_hint() -> None:
    """Every hint the kernel asks for is keyed by a kind and a name a config (or a stage)
    gives, never by a plugin's name written into the kernel."""
    source = Path(inspect.getfile(KoboiAgent)).parent
    asked = []
    for path in sorted(source.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        asked += re.findall(r"hints\.distribution\(\s*\"(\w+)\",\s*\"(\w+)\"", text)
    assert asked == [("stage", "mode")]


def test_koboi_register_config_sections() -> None:
    class Section:
        @hookimpl
        def koboi_register_config_sections(self, register: Callable[..., None]) -> None:
            register("mine", Settings, description="mine")

    catalog = bare_host((Section(), "mine")).catalog()
    assert catalog.sections.get("mine").target is Settings  # type: ignore[union-attr]
    config = validate_config({"llm": {"provider": "x"}, "mine": {"level": 3}}, catalog)
    assert config.section("mine") == Settings(level=3)


def test_koboi_register_providers() -> None:
    class Provider:
        @hookimpl
        def koboi_register_providers(self, register: Callable[..., None]) -> None:
            register("inorder", lambda options: InOrderModel(["hi"]), description="test")

    catalog = bare_host((Provider(), "p")).catalog()
    assert catalog.providers.get("inorder").plugin == "p"  # type: ignore[union-attr]


def test_koboi_register_tools() -> None:
    class Tools:
        @hookimpl
        def koboi_register_tools(self, register: Callable[..., None]) -> None:
            register(echo)
            register("made", lambda config: echo)

    catalog = bare_host((Tools(), "t")).catalog()
    assert catalog.tools.get("echo").target is echo  # type: ignore[union-attr]
    assert catalog.tools.names() == ["echo", "made"]


class OneToolToolset(Toolset):
    name = "ones"

    def __init__(self) -> None:
        self.opened = self.closed = False
        self.context: ToolsetContext | None = None

    async def open(self, context: ToolsetContext) -> None:
        self.opened = True
        self.context = context

    def tools(self) -> list[Any]:
        return [echo]

    async def aclose(self) -> None:
        self.closed = True


async def test_koboi_register_toolsets() -> None:
    made: list[OneToolToolset] = []

    class Toolsets:
        @hookimpl
        def koboi_register_toolsets(self, register: Callable[..., None]) -> None:
            def factory(config: Any) -> OneToolToolset | None:
                if config.agent.name != "with-toolset":
                    return None
                made.append(OneToolToolset())
                return made[-1]

            register("ones", factory, description="one tool")

    host = bare_host((Toolsets(), "ts"))
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "x"}, "agent": {"name": "with-toolset"}},
        host=host,
        provider=InOrderModel([{"name": "ones__echo", "arguments": {"text": "hey"}}, "done"]),
    )
    async with agent:
        # Offered in the toolset's namespace (its name, "ones"), the toolset's own tool
        # doing the work under its own name.
        assert made[0].opened and list(agent.tools) == ["ones__echo"]
        assert agent.tools["ones__echo"].original is echo  # type: ignore[attr-defined]
        # opened with the agent's own sandbox, store, config and host
        context = made[0].context
        assert context is not None and context.sandbox is agent.sandbox
        assert context.store is agent.store and context.host is host
        assert context.config is agent.config
        result = await agent.run("go")
    assert result.output == "done" and made[0].closed


def test_koboi_register_sandboxes() -> None:
    class Sandboxes:
        @hookimpl
        def koboi_register_sandboxes(self, register: Callable[..., None]) -> None:
            register("open", lambda options, config: PassthroughSandbox(), options=Settings)

    catalog = bare_host((Sandboxes(), "s")).catalog()
    config = validate_config(
        {"llm": {"provider": "x"}, "sandbox": {"backend": "open", "level": 2}}, catalog
    )
    assert config.sandbox_options == Settings(level=2)


def test_koboi_register_stores() -> None:
    class Stores:
        @hookimpl
        def koboi_register_stores(self, register: Callable[..., None]) -> None:
            register("mem2", lambda url, base: InMemoryStore(), default_url="mem2://")

    catalog = bare_host((Stores(), "st")).catalog()
    assert catalog.stores.get("mem2").extra == {"default_url": "mem2://"}  # type: ignore[union-attr]


class Twice(Runner):
    """Runs the loop, then once more on a second message."""

    name = "twice"

    async def run(self, run: RunHandle) -> Any:
        async for event in run.loop():
            yield event
        run.add_message("again")
        async for event in run.loop():
            yield event
        ending = run.ending
        assert ending is not None
        run.finish(f"twice: {ending.output}")


async def test_koboi_register_runners() -> None:
    class Runners:
        @hookimpl
        def koboi_register_runners(self, register: Callable[..., None]) -> None:
            register("twice", lambda options, config: Twice())

    host = bare_host((Runners(), "r"))
    store = InMemoryStore()
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "x"}, "agent": {"runner": "twice"}},
        host=host,
        provider=InOrderModel(["first", "second"]),
        store=store,
    )
    async with agent:
        result = await agent.run("go")
    assert result.output == "twice: second"
    events = await store.read(result.session_id)
    assert [e.type for e in events].count("run_continued") == 1
    assert events[0].data["runner"] == "twice"
    with pytest.raises(ConfigError, match="unknown runner 'nope'"):
        validate_config({"llm": {"provider": "x"}, "agent": {"runner": "nope"}}, host.catalog())
    assert isinstance(LoopRunner(), Runner)


def test_koboi_register_commands() -> None:
    class Commands:
        @hookimpl
        def koboi_register_commands(self, register: Callable[..., None]) -> None:
            register("hello", "some.module:app", help="say hello")

    assert bare_host((Commands(), "c")).commands().get("hello").description == "say hello"  # type: ignore[union-attr]


def test_koboi_register_run_sources() -> None:
    class Sources:
        @hookimpl
        def koboi_register_run_sources(self, register: Callable[..., None]) -> None:
            register("nb", "some.module:run", suffixes=(".nb",))

    host = bare_host((Sources(), "src"))
    assert host.run_source_for("x/y.NB").name == "nb"  # type: ignore[union-attr]


def summarize_notes(event_type: str, data: Any) -> str | None:
    """A plugin's summary of its events (imported by path in the test below)."""
    if event_type == "notes.saved":
        return f"saved {data['text']!r}"
    if event_type == "notes.broken":
        raise ValueError("cannot say")
    return None


def test_koboi_register_event_summaries(caplog: pytest.LogCaptureFixture) -> None:
    class Summaries:
        @hookimpl
        def koboi_register_event_summaries(self, register: Callable[..., None]) -> None:
            register(f"{__name__}:summarize_notes", description="notes in a word")

    host = bare_host((Summaries(), "notes"))
    entry = host.event_summaries().get("notes")
    assert entry is not None and entry.plugin == "notes"
    assert host.summarize_event("notes.saved", {"text": "milk"}) == "saved 'milk'"
    assert host.summarize_event("notes.other", {}) is None  # the plugin had nothing to say
    assert host.summarize_event("other.saved", {"text": "x"}) is None  # not its events
    with caplog.at_level("WARNING", logger="koboi.plugins"):
        assert host.summarize_event("notes.broken", {}) is None
    assert "the event summary of plugin 'notes'" in caplog.text and "cannot say" in caplog.text

    class Twice:
        @hookimpl
        def koboi_register_event_summaries(self, register: Callable[..., None]) -> None:
            register("a.b:c")
            register("a.b:d")

    twice = bare_host((Twice(), "twice"))
    assert twice.event_summaries().get("twice") is None
    failed = twice.get("twice")
    assert failed is not None and failed.status == "failed"
    assert "registers an event summary twice" in failed.reason


async def test_koboi_register_interceptors() -> None:
    seen: list[str] = []

    class Recorder(Interceptor):
        name = "recorder"

        async def on_event(self, event: Any, run: Any) -> None:
            seen.append(event.type)

    class Interceptors:
        @hookimpl
        def koboi_register_interceptors(self, register: Callable[..., None], config: Any) -> None:
            register(Recorder())

    host = bare_host((Interceptors(), "icp"))
    (found,) = host.interceptors(validate_config({"llm": {"provider": "x"}}, host.catalog()))
    assert found.plugin == "icp"  # tagged with its plugin
    agent = KoboiAgent.from_dict(
        {"llm": {"provider": "x"}}, host=host, provider=InOrderModel(["ok"])
    )
    async with agent:
        await agent.run("go")
    assert seen[0] == "run_started" and seen[-1] == "run_finished"


# -- plugins' own hooks: the rules ----------------------------------------------------------


class OwnerSpecs:
    @hookspecs.hookspec
    def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
        """Register things."""


class Owner:
    @hookimpl
    def koboi_register_hookspecs(self, register: Callable[..., None]) -> None:
        register(OwnerSpecs)


def test_a_hook_outside_the_plugins_namespace_is_refused() -> None:
    host = bare_host((Owner(), "someone-else"))
    info = host.get("someone-else")
    assert info is not None and info.status == "failed"
    assert "must be named koboi_someone_else_..." in info.reason


def test_an_implementation_of_an_absent_owners_hook_waits_and_is_never_called() -> None:
    called: list[int] = []

    class Implementer:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            called.append(1)

    host = bare_host((Implementer(), "user"))
    info = host.get("user")
    assert info is not None and info.status == "loaded"
    assert info.waiting == ["koboi_owner_register_things"]
    host.catalog()
    with pytest.raises(PluginError, match="no loaded plugin defines the hook"):
        host.collect("koboi_owner_register_things")
    assert not called


def test_the_same_name_from_two_plugins_fails_the_second_naming_both() -> None:
    class A:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            register("dup", 1)

    class B:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            register("dup", 2)

    host = bare_host((A(), "a"), (B(), "b"), (Owner(), "owner"))
    things = host.collect("koboi_owner_register_things")
    assert [(e.name, e.target) for e in things] == [("dup", 1)]
    info = host.get("b")
    assert info is not None and info.status == "failed"
    assert "'a' and 'b'" in info.reason


def test_a_failing_implementation_is_isolated_and_strict_mode_raises() -> None:
    class Broken:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            raise RuntimeError("cannot")

    host = bare_host((Broken(), "broken"), (Owner(), "owner"))
    assert list(host.collect("koboi_owner_register_things")) == []
    assert "koboi_owner_register_things failed: RuntimeError: cannot" in host.get("broken").reason  # type: ignore[union-attr]
    strict = PluginHost(load_entry_points=False, strict=True)
    strict.add_plugin(Owner(), "owner")
    strict.add_plugin(Broken(), "broken")
    with pytest.raises(PluginError, match="cannot"):
        strict.collect("koboi_owner_register_things")


def test_a_plugin_failing_a_later_hook_leaves_nothing_registered_behind() -> None:
    class HalfBroken:
        @hookimpl
        def koboi_register_tools(self, register: Callable[..., None]) -> None:
            register(echo)

        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            raise RuntimeError("cannot")

    class Fine:
        @hookimpl
        def koboi_owner_register_things(self, register: Callable[..., None]) -> None:
            register("kept", 1)

    host = bare_host((HalfBroken(), "half"), (Fine(), "fine"), (Owner(), "owner"))
    assert "echo" in host.catalog().tools
    assert [e.name for e in host.collect("koboi_owner_register_things")] == ["kept"]
    assert host.get("half").status == "failed"  # type: ignore[union-attr]
    # Its tool went with it: an agent cannot be given a failed plugin's tool.
    assert "echo" not in host.catalog().tools
    assert host.catalog().tools.by_plugin("half") == []


@pytest.mark.parametrize("plugin_id", ["builtin", "register", "register-x", "Register_"])
def test_ids_whose_hooks_would_look_like_the_kernels_are_refused(plugin_id: str) -> None:
    host = PluginHost(load_entry_points=False, strict=False)
    # ("builtin" is taken by the kernel's own plugin before the reservation is asked.)
    with pytest.raises(PluginError, match=r"reserved|already registered"):
        host.add_plugin(Owner(), plugin_id)
    assert reserved_id(plugin_id)
    assert not reserved_id("registry") and not reserved_id("weather")


@pytest.mark.parametrize("section", ["agent", "tools", "llm", "store", "extends"])
def test_a_plugin_cannot_register_a_kernel_section(section: str) -> None:
    class Squatter:
        @hookimpl
        def koboi_register_config_sections(self, register: Callable[..., None]) -> None:
            register(section, Settings)

    host = bare_host((Squatter(), "squatter"))
    catalog = host.catalog()
    info = host.get("squatter")
    assert info is not None and info.status == "failed"
    assert f"config section {section!r} is the kernel's" in info.reason
    assert section not in catalog.sections


def test_an_implementation_asking_for_arguments_the_spec_lacks_is_incompatible() -> None:
    class Greedy:
        @hookimpl
        def koboi_owner_register_things(self, register: Any, extra: Any) -> None:
            raise AssertionError("never called")

    host = bare_host((Greedy(), "greedy"), (Owner(), "owner"))
    info = host.get("greedy")
    assert info is not None and info.status == "incompatible"
    assert "extra" in info.reason


def test_a_newer_kernel_hook_makes_a_plugin_incompatible() -> None:
    class Future:
        @hookimpl
        def koboi_register_teleporters(self, register: Any) -> None:
            raise AssertionError("never called")

    info = bare_host((Future(), "future")).get("future")
    assert info is not None and info.status == "incompatible"
    assert "koboi_register_teleporters" in info.reason


def test_agreeing_hints_from_two_plugins_are_fine_conflicting_ones_fail() -> None:
    def hints(dist: str) -> object:
        class Hints:
            @hookimpl
            def koboi_register_hints(self, register: Callable[..., None]) -> None:
                register("tool", "x", dist)

        return Hints()

    same = bare_host((hints("koboi-x"), "h1"), (hints("koboi-x"), "h2"))
    assert same.catalog().hint("tool", "x") == "install koboi-x"
    assert same.get("h2").status == "loaded"  # type: ignore[union-attr]
    other = bare_host((hints("koboi-x"), "h1"), (hints("koboi-y"), "h2"))
    other.catalog()
    assert other.get("h2").status == "failed"  # type: ignore[union-attr]


# -- the rules of docs/hooks.md -----------------------------------------------------------


def test_every_hook_has_a_registrar_in_the_one_table() -> None:
    assert set(HOOKS) == set(hookspecs.HOOK_NAMES)
    assert set(CATALOG_HOOKS) == {h for h, d in HOOKS.items() if d.scope == "catalog"}


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_register_has_a_typed_protocol(name: str) -> None:
    annotation = inspect.signature(getattr(hookspecs, name)).parameters["register"].annotation
    protocol = getattr(hookspecs, str(annotation))
    assert getattr(protocol, "_is_protocol", False), f"{name}: register is not a Protocol"
    assert protocol.__name__.startswith("Register")
    assert protocol.__doc__, f"{protocol.__name__} has no docstring"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_every_hook_has_a_test_of_its_own(name: str) -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    assert re.search(rf"^(async )?def test_{name}\(", source, re.MULTILINE), (
        f"{Path(__file__).name} has no test_{name}"
    )
    assert inspect.getdoc(getattr(hookspecs, name))
