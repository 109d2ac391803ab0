from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pluggy
import pytest

from koboi import hookspecs
from koboi.config import resolve_store_url
from koboi.plugins import PluginHost
from koboi_store_sql import SQLStore


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "store-sql"]
    assert ep.value == "koboi_store_sql.plugin"


def _calls(hook: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    from koboi_store_sql import plugin

    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def register(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))

    getattr(pm.hook, hook)(register=register)
    return calls


def test_registers_sqlite_with_the_default_url_and_postgresql() -> None:
    calls = _calls("koboi_register_stores")
    schemes = {args[0]: (args[1], kwargs) for args, kwargs in calls}
    assert set(schemes) == {"sqlite", "postgresql"}
    assert schemes["sqlite"][1]["default_url"] == "sqlite:///.koboi/koboi.db"
    assert "default_url" not in schemes["postgresql"][1]
    assert all(kwargs["description"] for _, kwargs in schemes.values())


def test_factory_builds_a_store_relative_to_base_dir(tmp_path: Path) -> None:
    (factory, _) = next((a[1], k) for a, k in _calls("koboi_register_stores") if a[0] == "sqlite")
    store = factory("sqlite:///.koboi/koboi.db", tmp_path)
    assert isinstance(store, SQLStore)
    assert store.target.path == tmp_path / ".koboi" / "koboi.db"
    assert not (tmp_path / ".koboi").exists(), "nothing is created before open()"


def test_registers_the_db_command_lazily() -> None:
    ((args, kwargs),) = _calls("koboi_register_commands")
    assert args == ("db", "koboi_store_sql.cli:app")
    assert kwargs["help"]


def test_is_the_default_store_of_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KOBOI_STORE", raising=False)
    host = PluginHost(strict=True)
    host.load()
    assert resolve_store_url(None, host.catalog()) == "sqlite:///.koboi/koboi.db"


def test_plugin_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, koboi_store_sql.plugin, koboi_store_sql;"
        "heavy = [m for m in ('sqlalchemy', 'alembic', 'psycopg', 'typer') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
