from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from koboi import hookimpl
from koboi.plugins import PluginHost, reset_default_host


@pytest.fixture(autouse=True)
def _memory_store_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel tests never write a database into the working directory."""
    monkeypatch.setenv("KOBOI_STORE", "memory://")


@pytest.fixture(autouse=True)
def _fresh_default_host() -> Iterator[None]:
    reset_default_host()
    yield
    reset_default_host()


@pytest.fixture
def host() -> PluginHost:
    """A host with the built-in plugin and the workspace's installed plugins."""
    h = PluginHost(strict=True)
    h.load()
    return h


class HintsPlugin:
    """A plugin object that registers the hints it is given (``kind -> {name: dist}``)."""

    def __init__(self, hints: dict[str, dict[str, str]]) -> None:
        self.hints = hints

    @hookimpl
    def koboi_register_hints(self, register: Callable[..., None]) -> None:
        for kind, names in self.hints.items():
            for name, dist in names.items():
                register(kind, name, dist)


@pytest.fixture
def add_hints(host: PluginHost) -> Callable[..., PluginHost]:
    """``add_hints(tool={"crystal_ball": "koboi-tools-oracle"}, ...)``: the host, hinting them."""

    def add(**hints: dict[str, str]) -> PluginHost:
        host.add_plugin(HintsPlugin(hints), "test-hints")
        return host

    return add


FakeDist = Callable[..., Path]


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDist:
    """Install a throwaway distribution (real .dist-info metadata) on sys.path.

    ``fake_dist(name, module_source, entry="id", requires=["koboi-core>=0.1,<0.2"])``
    writes ``<module>.py`` and ``<dist>.dist-info`` so importlib.metadata finds
    a real ``koboi.plugins`` entry point, exactly as for an installed plugin.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def make(
        dist: str,
        source: str,
        *,
        entry: str,
        module: str | None = None,
        requires: list[str] | None = None,
        version: str = "1.0",
    ) -> Path:
        mod = module or dist.replace("-", "_")
        (site / f"{mod}.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        reqs = requires if requires is not None else ["koboi-core>=0.1,<0.2"]
        meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
        meta += [f"Requires-Dist: {r}" for r in reqs]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        (info / "entry_points.txt").write_text(f"[koboi.plugins]\n{entry} = {mod}\n")
        created.append(mod)
        return site

    yield make  # type: ignore[misc]
    for mod in created:
        sys.modules.pop(mod, None)
