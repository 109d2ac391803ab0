"""Several real processes on one database: leases, fencing and appends across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.errors import FencedOut
from koboi.store import NewEvent
from koboi_store_sql import SQLStore

WORKER = textwrap.dedent(
    """
    import json, sys, time
    import anyio
    from koboi.errors import LeaseHeld
    from koboi.store import NewEvent
    from koboi_store_sql import SQLStore

    url, session, name, start, action, count = sys.argv[1:7]

    async def main():
        async with SQLStore(url) as store:
            await anyio.sleep(max(0.0, float(start) - time.time()))
            if action == "acquire":
                try:
                    lease = await store.acquire_lease(session, name, 30)
                    print(json.dumps({"won": True, "fence": lease.fence}))
                except LeaseHeld as exc:
                    print(json.dumps({"won": False, "holder": exc.holder}))
            elif action == "append":
                seqs = []
                for i in range(int(count)):
                    stored = await store.append(session, [NewEvent("e", {"w": name, "i": i})])
                    seqs += [e.seq for e in stored]
                print(json.dumps({"seqs": seqs}))
            elif action == "take_over":
                lease = await store.acquire_lease(session, name, 30)
                await store.append(session, [NewEvent("by_" + name)], fence=lease.fence)
                print(json.dumps({"fence": lease.fence}))

    anyio.run(main)
    """
)


def _spawn(url: str, session: str, name: str, start: float, action: str, count: int = 0) -> Any:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, url, session, name, str(start), action, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: Any) -> dict[str, Any]:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    pg_url: str = request.getfixturevalue("pg_url")
    return pg_url


@pytest.mark.anyio
@pytest.mark.parametrize("round_", range(3))
async def test_two_processes_acquire_at_once_exactly_one_wins(url: str, round_: int) -> None:
    session = f"race-{round_}-{time.time_ns()}"
    async with SQLStore(url) as store:
        await store.create_session(session)
    # Both processes start, open the store, then acquire at the same instant.
    start = time.time() + 2.0
    workers = [_spawn(url, session, f"proc-{i}", start, "acquire") for i in range(2)]
    results = [_result(w) for w in workers]
    winners = [r for r in results if r["won"]]
    losers = [r for r in results if not r["won"]]
    assert len(winners) == 1, results
    assert len(losers) == 1, results
    assert winners[0]["fence"] == 1
    winner_name = f"proc-{results.index(winners[0])}"
    assert losers[0]["holder"] == winner_name, "LeaseHeld names the holder"


@pytest.mark.anyio
async def test_a_zombie_is_fenced_out_after_another_process_took_over(url: str) -> None:
    session = f"zombie-{time.time_ns()}"
    async with SQLStore(url) as store:
        await store.create_session(session)
        zombie = await store.acquire_lease(session, "zombie", 0.2)
        await store.append(session, [NewEvent("by_zombie")], fence=zombie.fence)
        await anyio.sleep(0.3)  # the zombie "pauses" past its lease
        heir = _result(_spawn(url, session, "heir", 0, "take_over"))
        assert heir["fence"] == zombie.fence + 1
        with pytest.raises(FencedOut, match="heir"):
            await store.append(session, [NewEvent("too_late")], fence=zombie.fence)
        with pytest.raises(FencedOut):
            await store.set_status(session, "completed", fence=zombie.fence)
        with pytest.raises(FencedOut):
            await store.renew_lease(zombie, 30)
        events = await store.read(session)
        assert [(e.seq, e.type) for e in events] == [(1, "by_zombie"), (2, "by_heir")]
        info = await store.get_session(session)
        assert (info.status, info.last_seq) == ("created", 2)


@pytest.mark.anyio
async def test_appends_from_several_processes_are_contiguous(url: str) -> None:
    session = f"appenders-{time.time_ns()}"
    async with SQLStore(url) as store:
        await store.create_session(session)
        start = time.time() + 2.0
        workers = [_spawn(url, session, f"w{i}", start, "append", 40) for i in range(3)]
        returned = sorted(s for w in workers for s in _result(w)["seqs"])
        events = await store.read(session)
    assert returned == list(range(1, 121))
    assert [e.seq for e in events] == list(range(1, 121))
    for name in ("w0", "w1", "w2"):
        mine = [e.data["i"] for e in events if e.data["w"] == name]
        assert mine == list(range(40))
