"""``koboi db current`` and ``koboi db upgrade``, through the real ``koboi`` command."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from koboi.plugins import reset_default_host
from koboi_cli.app import app
from koboi_store_sql.migrate import revisions
from koboi_store_sql.schema import VERSION_TABLE

HEAD = revisions().head


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "1")
    for name in ("KOBOI_STORE", "KOBOI_DEBUG", "KOBOI_LOAD_PLUGINS", "KOBOI_DISABLE_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    reset_default_host()
    yield
    reset_default_host()


def _koboi(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_db_is_listed_as_a_plugin_command() -> None:
    code, out, _ = _koboi("--help")
    assert code == 0
    assert "db" in out.split("Plugin commands", 1)[1]


def test_current_then_upgrade_the_default_store(tmp_path: Path) -> None:
    default = tmp_path / ".koboi" / "koboi.db"
    code, out, err = _koboi("db", "current")
    assert code == 0, err
    assert f"database: {default}" in out
    assert "revision: (none)" in out
    assert f"latest known: {HEAD}" in out
    assert "no database yet" in out
    assert not default.exists(), "current never creates the database"

    code, out, err = _koboi("db", "upgrade")
    assert code == 0, err
    assert out == f"upgraded {default} from revision (none) to {HEAD}\n"
    assert default.is_file()

    code, out, _ = _koboi("db", "current")
    assert f"revision: {HEAD}" in out
    assert "status: up to date" in out
    code, out, _ = _koboi("db", "upgrade")
    assert out == f"{default} is already at revision {HEAD}\n"


def test_store_from_the_config_relative_to_its_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = project / "agent.yaml"
    config.write_text("llm: {provider: scripted}\nstore: {url: 'sqlite:///data/agent.db'}\n")
    code, out, err = _koboi("db", "upgrade", "--config", str(config))
    assert code == 0, err
    assert (project / "data" / "agent.db").is_file()
    code, out, _ = _koboi("db", "current", "-c", str(config))
    assert f"database: {project / 'data' / 'agent.db'}" in out


def test_koboi_store_environment_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KOBOI_STORE", f"sqlite:///{tmp_path}/env.db?durability=process")
    code, _, err = _koboi("db", "upgrade")
    assert code == 0, err
    assert (tmp_path / "env.db").is_file()


def test_a_newer_database_is_reported_and_refused(tmp_path: Path) -> None:
    assert _koboi("db", "upgrade")[0] == 0
    path = tmp_path / ".koboi" / "koboi.db"
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999_future'")
    connection.close()
    code, out, _ = _koboi("db", "current")
    assert code == 0
    assert "revision: 9999_future" in out
    assert "written by a newer koboi" in out
    code, out, err = _koboi("db", "upgrade")
    assert code == 1
    assert err.startswith("error: the database")
    assert "written by a newer koboi (schema revision 9999_future" in err
    assert "Traceback" not in err


def test_a_non_sql_store_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_STORE", "memory://")
    code, _, err = _koboi("db", "current")
    assert code == 1
    assert err.strip().splitlines() == [
        "error: the store is memory://, which koboi db does not manage (it manages "
        "sqlite:/// and postgresql:// stores); set store.url or KOBOI_STORE"
    ]


def test_a_file_that_is_not_a_database_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / ".koboi").mkdir()
    (tmp_path / ".koboi" / "koboi.db").write_text("hello")
    code, _, err = _koboi("db", "upgrade")
    assert code == 1
    assert "is not a SQLite database" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.postgres
def test_current_on_postgresql(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    monkeypatch.setenv("KOBOI_STORE", pg_url)
    code, out, err = _koboi("db", "upgrade")
    assert code == 0, err
    code, out, err = _koboi("db", "current")
    assert code == 0, err
    assert "database: postgresql+psycopg://postgres@127.0.0.1:5432/test" in out
    assert f"revision: {HEAD}" in out
