"""The SQLite store is koboi's alone: 0600 files in a 0700 directory, also under a loose umask.

Each check has its control: SQLite by itself, under the same umask, makes a
database (and its WAL files) that every user may read.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from koboi.store import NewEvent
from koboi_store_sql import SQLStore

pytestmark = pytest.mark.anyio


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask of a careless shell: what a user's default lets everyone read."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


async def _write(store: SQLStore) -> None:
    await store.create_session("s1")
    await store.append("s1", [NewEvent("user_message", {"text": "a private input"})])


def _sqlite_alone(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE t (x)")
    connection.execute("INSERT INTO t VALUES (1)")
    connection.commit()
    connection.close()


async def test_a_new_store_is_0600_in_a_0700_directory(tmp_path: Path, loose_umask: None) -> None:
    control = tmp_path / "control" / "plain.db"
    control.parent.mkdir()
    _sqlite_alone(control)
    assert _mode(control) == 0o644, "control: SQLite alone makes a readable database"

    store = SQLStore("sqlite:///.koboi/koboi.db", tmp_path)
    async with store:
        await _write(store)
        db = tmp_path / ".koboi" / "koboi.db"
        side = [Path(f"{db}{suffix}") for suffix in ("-wal", "-shm")]
        assert all(p.exists() for p in side), "the WAL files exist while the store is open"
        assert _mode(tmp_path / ".koboi") == 0o700
        assert {p.name: _mode(p) for p in (db, *side)} == {
            "koboi.db": 0o600,
            "koboi.db-wal": 0o600,
            "koboi.db-shm": 0o600,
        }


async def test_every_directory_koboi_makes_on_the_way_is_private(
    tmp_path: Path, loose_umask: None
) -> None:
    async with SQLStore("sqlite:///state/deep/koboi.db", tmp_path) as store:
        await _write(store)
    assert _mode(tmp_path / "state") == 0o700
    assert _mode(tmp_path / "state" / "deep") == 0o700


async def test_an_old_permissive_store_is_tightened(
    tmp_path: Path, loose_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / ".koboi"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    db = state / "koboi.db"
    async with SQLStore(f"sqlite:///{db}") as store:
        await _write(store)
    # What an older koboi left: readable by everyone, WAL files too.
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        if path.exists():
            path.chmod(0o644)
    state.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="koboi.store"):
        async with SQLStore(f"sqlite:///{db}") as store:
            await _write_more(store)
            assert _mode(db) == 0o600
            for suffix in ("-wal", "-shm"):
                assert _mode(Path(f"{db}{suffix}")) == 0o600
    # koboi's own directory loses read and write for others (passage stays, for the
    # restricted sandbox's per-session users on their way to .koboi/workdirs).
    assert _mode(state) == 0o711
    assert "readable by other users" in caplog.text


async def _write_more(store: SQLStore) -> None:
    await store.append("s1", [NewEvent("user_message", {"text": "more"})])


async def test_a_directory_of_the_operators_is_not_changed_but_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # someone else's choice: koboi does not change it...
    with caplog.at_level(logging.WARNING, logger="koboi.store"):
        async with SQLStore(f"sqlite:///{shared / 'koboi.db'}") as store:
            await _write(store)
    assert _mode(shared) == 0o777
    assert _mode(shared / "koboi.db") == 0o600  # ...but the store's own files are private
    assert "may write to the store's directory" in caplog.text  # ...and says what is wrong


async def test_a_file_of_another_user_is_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        # CI runs as root: there a skip would hide this test, so it fails instead.
        assert not os.environ.get("CI"), "needs root to give the database to another user"
        pytest.skip("needs root to give the database to another user")
    db = tmp_path / "theirs.db"
    db.touch()  # an empty file: a new database to SQLite
    os.chown(db, 65534, 65534)
    db.chmod(0o644)
    async with SQLStore(f"sqlite:///{db}") as store:
        await _write(store)
    assert _mode(db) == 0o644  # not koboi's file: its mode is its owner's business
