"""The plugin's registrations, and the run-source seam of the kernel it rides on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from koboi import hookimpl
from koboi.errors import PluginError
from koboi.plugins import PluginHost


def test_the_plugin_registers_its_commands_and_the_bundle_run_source() -> None:
    host = PluginHost()
    host.load()
    info = host.get("replay")
    assert info is not None and info.status == "loaded", info
    commands = {e.name: e for e in host.commands() if e.plugin == "replay"}
    assert sorted(commands) == ["capture", "export", "import", "workflows"]
    assert all(e.target.startswith("koboi_replay.cli:") for e in commands.values())
    source = host.run_source_for("some/dir/RUN.KOBOI")
    assert source is not None and source.plugin == "replay"
    assert source.target == "koboi_replay.run_source:run"
    assert host.run_source_for("agent.yaml") is None
    assert host.run_source_for("run.koboi.yaml") is None


def test_help_imports_nothing_of_the_plugin_but_its_hooks() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.argv = ["koboi", "--help"]
        from koboi_cli.app import main
        try:
            main()
        except SystemExit:
            pass
        print(sorted(m for m in sys.modules if m.startswith("koboi_replay")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert "capture" in result.stdout and "workflows" in result.stdout
    loaded = result.stdout.strip().splitlines()[-1]
    assert loaded == "['koboi_replay', 'koboi_replay.plugin']", result.stderr


def _source_plugin(*args: object, **kwargs: object) -> object:
    class Plugin:
        @staticmethod
        @hookimpl
        def koboi_register_run_sources(register: Callable[..., None]) -> None:
            register(*args, **kwargs)

    return Plugin()


def _host(**plugins: object) -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=False)
    for name, plugin in plugins.items():
        host.add_plugin(plugin, name)
    return host


def test_the_longest_suffix_wins_case_insensitively() -> None:
    host = _host(
        short=_source_plugin("short", "a.b:run", suffixes=(".gz",)),
        long=_source_plugin("long", "c.d:run", suffixes=[".tar.gz", ".tgz"]),
    )
    assert host.run_source_for("x.TAR.GZ").name == "long"  # type: ignore[union-attr]
    assert host.run_source_for("x.gz").name == "short"  # type: ignore[union-attr]
    assert host.run_source_for("x.tgz").name == "long"  # type: ignore[union-attr]
    assert host.run_source_for("x.zip") is None
    assert host.catalog().run_sources.names() == ["long", "short"]


def test_a_suffix_claimed_twice_fails_the_later_plugin_naming_both() -> None:
    host = _host(
        first=_source_plugin("one", "a.b:run", suffixes=(".koboi",)),
        second=_source_plugin("two", "c.d:run", suffixes=(".other", ".KOBOI")),
    )
    assert host.run_source_for("x.koboi").plugin == "first"  # type: ignore[union-attr]
    second = host.get("second")
    assert second is not None and second.status == "failed"
    assert "'.koboi' is claimed by two run sources" in second.reason
    assert "'first'" in second.reason and "'second'" in second.reason
    # Nothing of the failed plugin is kept, not even its other suffix.
    assert host.run_source_for("x.other") is None


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("bad", "no_colon"), {"suffixes": (".x",)}, "import path"),
        (("bad", "a.b:run"), {"suffixes": ()}, "non-empty sequence"),
        (("bad", "a.b:run"), {"suffixes": ".x"}, "non-empty sequence"),
        (("bad", "a.b:run"), {"suffixes": ("x",)}, "must start with '.'"),
    ],
)
def test_malformed_run_sources_are_refused(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(_source_plugin(*args, **kwargs), "bad")
    with pytest.raises(PluginError, match=message):
        host.run_sources()
    # Control: the same registration, well formed, is accepted.
    good = _host(ok=_source_plugin("good", "a.b:run", suffixes=(".x",)))
    assert good.run_source_for("f.x") is not None
