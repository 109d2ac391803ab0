"""Session totals on the session row (migration 0005): kept as events are appended, and
unknown (None, never a partial sum) for sessions written before the migration."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from koboi.journal import totals_of
from koboi.store import NewEvent, SessionTotals
from koboi_store_sql import SQLStore
from koboi_store_sql.migrate import MIGRATIONS


def _answered(tokens: int, cost: float) -> NewEvent:
    response = {"usage": {"input_tokens": tokens, "output_tokens": 1}, "cost_usd": cost}
    return NewEvent("model_call_finished", {"step": 1, "response": response})


@pytest.fixture
def migrations_up_to_0004(tmp_path: Path) -> Path:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "versions" / "0005_session_totals.py").unlink()
    return copy


@pytest.mark.anyio
async def test_totals_follow_appends(db_path: Path) -> None:
    async with SQLStore(f"sqlite:///{db_path}") as store:
        sid = (await store.create_session()).id
        await store.append(sid, [NewEvent("run_started", {}), _answered(10, 0.5)])
        await store.append(sid, [NewEvent("tool_call_finished", {"content": "x"})])
        await store.append(sid, [_answered(5, 0.25)])
        info = await store.get_session(sid)
        assert info.totals == SessionTotals(1, 2, 15, 2, 0.75)
        assert info.totals == totals_of(await store.read(sid))


@pytest.mark.anyio
async def test_sessions_older_than_the_migration_have_no_totals(
    db_path: Path, migrations_up_to_0004: Path
) -> None:
    url = f"sqlite:///{db_path}"
    async with SQLStore(url, migrations=migrations_up_to_0004) as old:
        assert await old.schema_revision() == "0004"
    # Written as koboi-store-sql at revision 0004 wrote it (its rows had no totals).
    connection = sqlite3.connect(db_path)
    with connection:
        connection.execute(
            "INSERT INTO sessions (id, status, created_at, updated_at, config_name, "
            "config_hash, owner, metadata, last_seq) VALUES ('before', 'completed', 1, 1, "
            "'', '', NULL, '{}', 2)"
        )
        for seq, event in enumerate([NewEvent("run_started", {}), _answered(10, 1.0)], 1):
            connection.execute(
                "INSERT INTO events (session_id, seq, type, data, at) VALUES (?, ?, ?, ?, 1)",
                ("before", seq, event.type, json.dumps(dict(event.data))),
            )
    connection.close()
    async with SQLStore(url) as new:
        assert await new.schema_revision() == "0005"
        await new.append("before", [_answered(3, 0.5)])
        # Unknown rather than wrong: the 10 tokens and $1 before the upgrade are not in it.
        assert (await new.get_session("before")).totals is None
        assert totals_of(await new.read("before")).cost_usd == pytest.approx(1.5)
        after = (await new.create_session("after")).id
        await new.append(after, [_answered(3, 0.5)])
        assert (await new.get_session(after)).totals == SessionTotals(0, 1, 3, 1, 0.5)
