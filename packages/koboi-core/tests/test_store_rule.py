"""One rule for the store a command uses, with or without a config (docs/config.md,
"Finding the store"): a URL the config does not write resolves in the project directory."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from koboi.config import load_config, project_dir, resolve_store
from koboi.plugins import PluginHost

CONFIG = 'llm: {provider: scripted, script: ["hi"]}\n'


def _default_store_host() -> PluginHost:
    """The scripted model and a store plugin that declares a default URL."""
    import koboi_scripted.plugin
    from koboi.hookspecs import hookimpl

    @hookimpl
    def koboi_register_stores(register: Any) -> None:
        register("filedb", lambda url, base: None, default_url="filedb:///.koboi/k.db")

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    host.add_plugin(SimpleNamespace(koboi_register_stores=koboi_register_stores), "filedb")
    return host


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KOBOI_STORE", raising=False)


def _config(directory: Path, extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "agent.yaml"
    path.write_text(CONFIG + extra)
    return path


def test_a_config_below_the_working_directory_uses_the_working_directorys_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _default_store_host()
    monkeypatch.chdir(tmp_path)
    config = load_config(_config(tmp_path / "configs"), host.catalog(), env={})
    assert project_dir(config) == tmp_path.resolve()
    with_config = resolve_store(config, host.catalog())
    without = resolve_store(None, host.catalog())
    assert with_config == without == ("filedb:///.koboi/k.db", tmp_path.resolve())


def test_a_config_elsewhere_keeps_its_store_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _default_store_host()
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    config = load_config(_config(tmp_path / "elsewhere"), host.catalog(), env={})
    assert resolve_store(config, host.catalog())[1] == (tmp_path / "elsewhere").resolve()


def test_koboi_store_follows_the_same_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = _default_store_host()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KOBOI_STORE", "filedb:///shared.db")
    config = load_config(_config(tmp_path / "configs"), host.catalog(), env={})
    assert resolve_store(config, host.catalog()) == ("filedb:///shared.db", tmp_path.resolve())


def test_a_url_the_config_writes_is_relative_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _default_store_host()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KOBOI_STORE", "filedb:///ignored.db")
    path = _config(tmp_path / "configs", 'store: {url: "filedb:///own.db"}\n')
    config = load_config(path, host.catalog(), env={})
    assert resolve_store(config, host.catalog()) == ("filedb:///own.db", path.parent.resolve())


def test_without_a_default_store_it_is_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import koboi_scripted.plugin

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted")
    monkeypatch.chdir(tmp_path)
    assert resolve_store(None, host.catalog())[0] == "memory://"
