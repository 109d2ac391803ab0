"""Discovery isolation: broken, incompatible and conflicting plugins never take the rest down."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from koboi.errors import PluginError
from koboi.plugins import PluginHost

GOOD = """
from koboi import hookimpl, tool

@tool
def shout(text: str) -> str:
    '''Upper-case the text.'''
    return text.upper()

@hookimpl
def koboi_register_tools(register):
    register(shout)
"""


def _host(monkeypatch: pytest.MonkeyPatch, only: str, strict: bool = False) -> PluginHost:
    monkeypatch.setenv("KOBOI_LOAD_PLUGINS", only)
    host = PluginHost(strict=strict)
    host.load()
    return host


def test_good_plugin_is_found_from_metadata_and_loaded(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-good", GOOD, entry="good")
    host = _host(monkeypatch, "good")
    info = host.get("good")
    assert info is not None
    assert (info.status, info.dist, info.version) == ("loaded", "koboi-good", "1.0")
    assert info.hooks == ["koboi_register_tools"]
    assert "shout" in host.catalog().tools
    assert host.catalog().tools.get("shout").plugin == "good"  # type: ignore[union-attr]


def test_plugin_that_raises_on_import_is_listed_and_the_rest_works(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-good", GOOD, entry="good")
    fake_dist("koboi-broken", "raise RuntimeError('boom at import')\n", entry="broken")
    host = _host(monkeypatch, "good,broken")
    broken = host.get("broken")
    assert broken is not None and broken.status == "failed"
    assert "RuntimeError: boom at import" in broken.reason
    assert host.get("good").status == "loaded"  # type: ignore[union-attr]
    assert "shout" in host.catalog().tools


def test_strict_mode_turns_a_broken_plugin_into_an_error(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-broken", "raise RuntimeError('boom')\n", entry="broken")
    with pytest.raises(PluginError, match=r"plugin 'broken' \(koboi-broken 1.0\): import failed"):
        _host(monkeypatch, "broken", strict=True)


def test_strict_mode_follows_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "1")
    assert PluginHost().strict is True
    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "0")
    assert PluginHost().strict is False


def test_incompatible_kernel_range_is_refused_before_import(fake_dist, monkeypatch) -> None:
    fake_dist(
        "koboi-future",
        "raise AssertionError('must not be imported')\n",
        entry="future",
        requires=["koboi-core>=9.0,<10"],
    )
    host = _host(monkeypatch, "future")
    info = host.get("future")
    assert info is not None and info.status == "incompatible"
    assert "requires koboi-core>=9.0,<10" in info.reason
    assert "koboi_future" not in sys.modules


def test_unknown_hook_makes_a_plugin_incompatible(fake_dist, monkeypatch) -> None:
    source = """
from koboi import hookimpl

@hookimpl
def koboi_register_teleporters(register):
    pass
"""
    fake_dist("koboi-odd", source, entry="odd")
    fake_dist("koboi-good", GOOD, entry="good")
    host = _host(monkeypatch, "odd,good")
    info = host.get("odd")
    assert info is not None and info.status == "incompatible"
    assert "koboi_register_teleporters" in info.reason
    assert host.get("good").status == "loaded"  # type: ignore[union-attr]


def test_duplicate_tool_name_from_two_plugins_names_both(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-good", GOOD, entry="good")
    fake_dist("koboi-copycat", GOOD, entry="copycat", module="koboi_copycat")
    host = _host(monkeypatch, "good,copycat")
    catalog = host.catalog()
    # Deterministic order: 'copycat' sorts first, so 'good' is the one refused.
    assert catalog.tools.get("shout").plugin == "copycat"  # type: ignore[union-attr]
    good = host.get("good")
    assert good is not None and good.status == "failed"
    assert "tool 'shout' is registered by two plugins: 'copycat' and 'good'" in good.reason


def test_duplicate_is_an_error_in_strict_mode(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-good", GOOD, entry="good")
    fake_dist("koboi-copycat", GOOD, entry="copycat", module="koboi_copycat")
    host = _host(monkeypatch, "good,copycat", strict=True)
    with pytest.raises(PluginError, match="registered by two plugins"):
        host.catalog()


def test_registration_hook_that_raises_is_isolated(fake_dist, monkeypatch) -> None:
    source = """
from koboi import hookimpl

@hookimpl
def koboi_register_tools(register):
    raise ValueError('cannot build my tools')
"""
    fake_dist("koboi-flaky", source, entry="flaky")
    fake_dist("koboi-good", GOOD, entry="good")
    host = _host(monkeypatch, "flaky,good")
    catalog = host.catalog()
    flaky = host.get("flaky")
    assert flaky is not None and flaky.status == "failed"
    assert "registration failed: ValueError: cannot build my tools" in flaky.reason
    assert "shout" in catalog.tools


def test_disable_filter_applies_before_import(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-good", "raise AssertionError('imported')\n", entry="good")
    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "good")
    monkeypatch.delenv("KOBOI_LOAD_PLUGINS", raising=False)
    host = PluginHost(strict=True)
    host.load()
    info = host.get("good")
    assert info is not None and info.status == "disabled"
    assert "KOBOI_DISABLE_PLUGINS" in info.reason
    assert "koboi_good" not in sys.modules


def test_load_filter_empty_means_no_plugins(monkeypatch) -> None:
    host = _host(monkeypatch, "", strict=True)
    statuses = {p.id: p.status for p in host.plugins}
    assert statuses.pop("builtin") == "loaded"
    assert statuses and set(statuses.values()) == {"disabled"}


def test_order_is_builtin_first_then_sorted(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-zeta", GOOD, entry="zeta", module="koboi_zeta")
    fake_dist("koboi-alpha", "", entry="alpha", module="koboi_alpha")
    host = _host(monkeypatch, "zeta,alpha")
    ids = [p.id for p in host.plugins]
    assert ids[0] == "builtin"
    assert ids[1:] == sorted(ids[1:])


def test_reserved_id_is_refused(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-impostor", GOOD, entry="builtin", module="koboi_impostor")
    monkeypatch.delenv("KOBOI_LOAD_PLUGINS", raising=False)
    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "")
    host = PluginHost(strict=False)
    host.load()
    assert host.get("builtin").dist == "koboi-core"  # type: ignore[union-attr]
    assert "koboi_impostor" not in sys.modules


def test_same_id_from_two_distributions_fails_both_names(fake_dist, monkeypatch) -> None:
    fake_dist("koboi-one", GOOD, entry="twin", module="koboi_one")
    fake_dist("koboi-two", GOOD, entry="twin", module="koboi_two")
    host = _host(monkeypatch, "twin")
    info = host.get("twin")
    assert info is not None and info.status == "failed"
    assert "koboi-one" in info.reason and "koboi-two" in info.reason


def test_installed_workspace_plugins_load_strictly(host: PluginHost) -> None:
    loaded = {p.id for p in host.plugins if p.status == "loaded"}
    assert {"builtin", "scripted", "tools-basic"} <= loaded
    catalog = host.catalog()
    assert {"calculator", "current_time"} <= set(catalog.tools.names())
    assert "scripted" in catalog.providers
    assert {"memory"} <= set(catalog.stores.names())
    assert "passthrough" in catalog.sandboxes


def test_add_plugin_object_and_bad_registrations() -> None:
    from koboi import hookimpl

    class Bad:
        @hookimpl
        def koboi_register_providers(self, register):  # type: ignore[no-untyped-def]
            register("x", "not callable")

    host = PluginHost(load_entry_points=False, strict=False)
    host.add_plugin(Bad(), "bad")
    host.catalog()
    info = host.get("bad")
    assert info is not None and info.status == "failed"
    assert "factory must be callable" in info.reason
    with pytest.raises(PluginError, match="already registered"):
        host.add_plugin(Bad(), "bad")


def test_hook_may_declare_fewer_arguments_than_the_spec() -> None:
    from koboi import Interceptor, hookimpl
    from koboi.config import validate_config

    class Quiet(Interceptor):
        name = "quiet"

    class Plugin:
        @hookimpl
        def koboi_register_interceptors(self, register):  # type: ignore[no-untyped-def]
            register(Quiet())

    host = PluginHost(strict=True)
    host.load()
    host.add_plugin(Plugin(), "quiet")
    config = validate_config({"llm": {"provider": "scripted"}}, host.catalog())
    # Installed plugins (koboi-governance in the full environment) may add their own.
    assert "Quiet" in [type(i).__name__ for i in host.interceptors(config)]


def test_collecting_commands_imports_no_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from koboi.plugins import PluginHost\n"
        "host = PluginHost(strict=True)\n"
        "host.load()\n"
        "host.commands()\n"
        "print(sorted(m for m in ('pydantic', 'koboi.loop', 'koboi.config') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_sources_are_chosen_by_the_longest_suffix_and_never_claimed_twice() -> None:
    from koboi import hookimpl
    from koboi.errors import PluginError

    class Bundles:
        @hookimpl
        def koboi_register_run_sources(self, register):  # type: ignore[no-untyped-def]
            register("bundle", "pkg.mod:run", suffixes=(".koboi",))
            register("zipped", "pkg.mod:run_zip", suffixes=(".koboi.zip",))

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(Bundles(), "bundles")
    found = host.run_source_for("Run.KOBOI")
    assert found is not None and found.name == "bundle"
    zipped = host.run_source_for("/tmp/x.koboi.zip")
    assert zipped is not None and zipped.name == "zipped"
    assert host.run_source_for("agent.yaml") is None

    class Rival:
        @hookimpl
        def koboi_register_run_sources(self, register):  # type: ignore[no-untyped-def]
            register("other", "pkg.other:run", suffixes=(".KOBOI",))

    rival = PluginHost(load_entry_points=False, strict=True)
    rival.add_plugin(Bundles(), "bundles")
    rival.add_plugin(Rival(), "rival")
    with pytest.raises(PluginError, match=r"'\.koboi' is claimed by two run sources.*'rival'"):
        rival.run_sources()


def test_every_lazy_name_of_the_package_is_typed_and_exported() -> None:
    """``from koboi import X`` works at run time (lazily) and for type checkers alike."""
    import ast
    import importlib

    import koboi

    tree = ast.parse(Path(koboi.__file__).read_text(encoding="utf-8"))
    typed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    typed.update(a.asname or a.name for a in inner.names)
    lazy = koboi._LAZY
    assert sorted(set(lazy) - typed) == [], "lazy names a type checker cannot see"
    assert set(koboi.__all__) - {"__version__"} == set(lazy)
    for name, module in lazy.items():
        assert getattr(koboi, name) is getattr(importlib.import_module(module), name)
