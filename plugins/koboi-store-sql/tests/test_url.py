from __future__ import annotations

from pathlib import Path

import pytest

from koboi.errors import StoreError
from koboi_store_sql import parse_store_url


def test_relative_sqlite_path_resolves_against_base_dir(tmp_path: Path) -> None:
    target = parse_store_url("sqlite:///.koboi/koboi.db", tmp_path)
    assert target.dialect == "sqlite"
    assert target.path == tmp_path / ".koboi" / "koboi.db"
    assert target.driver_url == f"sqlite:///{tmp_path}/.koboi/koboi.db"
    assert (target.durability, target.busy_timeout) == ("power_loss", 5.0)


def test_absolute_sqlite_path_ignores_base_dir(tmp_path: Path) -> None:
    target = parse_store_url(f"sqlite:///{tmp_path}/a/../k.db", Path("/elsewhere"))
    assert target.path == tmp_path / "k.db"


def test_sqlite_options_from_the_query_string(tmp_path: Path) -> None:
    target = parse_store_url("sqlite:///k.db?durability=process&busy_timeout=0.5", tmp_path)
    assert (target.durability, target.busy_timeout) == ("process", 0.5)
    assert "?" not in target.driver_url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///k.db?durabilty=process", "unknown option"),
        ("sqlite:///k.db?durability=sometimes", "power_loss, process"),
        ("sqlite:///k.db?busy_timeout=soon", "number of seconds"),
        ("sqlite:///k.db?busy_timeout=-1", "out of range"),
        ("sqlite://", "names no database file"),
        ("sqlite:///:memory:", "names no database file"),
        ("sqlite+aiosqlite:///k.db", "unsupported SQLite driver"),
        ("postgresql+asyncpg://u@h/db", "unsupported PostgreSQL driver"),
        ("postgresql://u@h/db?pool_size=0", "out of range"),
        ("mysql://u@h/db", "handles sqlite:/// and postgresql://"),
        ("not a url", "not a store URL"),
    ],
)
def test_bad_urls_are_clear_errors(url: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=message):
        parse_store_url(url, tmp_path)


def test_postgresql_maps_to_psycopg_and_keeps_driver_options() -> None:
    target = parse_store_url(
        "postgresql://koboi:s3cret@db:5433/prod?sslmode=require&pool_size=9&durability=process"
    )
    assert target.dialect == "postgresql"
    assert target.driver_url.startswith("postgresql+psycopg://koboi:s3cret@db:5433/prod")
    assert "sslmode=require" in target.driver_url
    assert "pool_size" not in target.driver_url
    assert (target.pool_size, target.durability) == (9, "process")
    assert "s3cret" not in target.label, "passwords never reach messages"


def test_password_is_hidden_in_url_errors() -> None:
    with pytest.raises(StoreError) as caught:
        parse_store_url("postgresql://koboi:s3cret@db/prod?durability=never")
    assert "s3cret" not in str(caught.value)
