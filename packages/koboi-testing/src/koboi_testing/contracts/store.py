"""Contract suites for stores: the journal (:class:`JournalStoreContract`, what every store
must pass) and one suite per optional capability (:class:`KeyedRecordsContract`,
:class:`JobQueueContract`, :class:`ResponseCacheContract`); :class:`StoreContract` is
all of them, for a store with every capability."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koboi.errors import (
    FencedOut,
    IdempotencyConflict,
    JobNotFound,
    LeaseHeld,
    SessionNotFound,
    StoreError,
)
from koboi.store import (
    JobQueue,
    JournalEvent,
    KeyedRecords,
    Lease,
    NewEvent,
    ResponseCache,
    SessionInfo,
    Store,
    unwrap,
)

# A pause long enough for any store's clock to tell two writes apart.
_TICK = 0.02
# A lease short enough to wait out in a test, long enough not to expire mid-step.
_TTL = 0.2

# No NUL: PostgreSQL's jsonb (and others) cannot store it, and no agent needs it.
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
_keys = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | _text
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=10,
)
_events = st.builds(
    NewEvent,
    type=st.sampled_from(["user", "model_response", "tool_result", "note.ü"]),
    data=st.dictionaries(_keys, _json_values, max_size=4),
)
# An operation of the property test: append a batch to one of two sessions, or
# read one of them with random bounds.
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1), st.lists(_events, max_size=4)),
        st.tuples(
            st.just("read"),
            st.integers(0, 1),
            st.integers(min_value=0, max_value=12),
            st.none() | st.integers(min_value=0, max_value=12),
        ),
    ),
    max_size=12,
)


def _unique(prefix: str) -> str:
    """A fresh id, so the suite can share a store (database) with other tests."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class JournalStoreContract:
    """Behaviour every :class:`~koboi.store.Store` must show: sessions, journals, the audit
    trail, leases and fencing (the one required contract of a store).

    **Required fixture** ``store``: an *opened* store (sync or async fixture;
    ``async with MyStore(...) as s: yield s``). The suite only creates sessions
    with fresh random ids and filters listings by fresh owners, so the store
    may be shared with other tests (e.g. one database for the whole run) and
    need not be empty.

    Timestamps: the suite sleeps 20 ms between writes whose order it checks, so
    a store must record ``updated_at`` with at least that resolution.

    Leases: the suite takes leases of 0.2 s and sleeps past their expiry, so a
    store must judge expiry with the writing process's clock to that precision.
    """

    # -- sessions ----------------------------------------------------------

    @pytest.mark.anyio
    async def test_create_and_get_session(self, store: Store) -> None:
        sid = _unique("create")
        before = time.time()
        created = await store.create_session(
            sid,
            config_name="assistant.yaml",
            config_hash="abc123",
            owner="alice",
            metadata={"title": "Café ☕", "tags": ["a", "b"], "nested": {"n": 1}},
        )
        assert isinstance(created, SessionInfo)
        assert created.id == sid
        assert created.status == "created"
        assert created.config_name == "assistant.yaml"
        assert created.config_hash == "abc123"
        assert created.owner == "alice"
        assert dict(created.metadata) == {
            "title": "Café ☕",
            "tags": ["a", "b"],
            "nested": {"n": 1},
        }
        assert before - 300 <= created.created_at <= time.time() + 300
        assert created.updated_at >= created.created_at

        fetched = await store.get_session(sid)
        assert fetched.id == sid
        assert fetched.status == created.status
        assert fetched.owner == "alice"
        assert fetched.config_name == created.config_name
        assert fetched.config_hash == created.config_hash
        assert dict(fetched.metadata) == dict(created.metadata)
        assert fetched.created_at == pytest.approx(created.created_at, abs=1e-3)

    @pytest.mark.anyio
    async def test_create_session_defaults(self, store: Store) -> None:
        created = await store.create_session(_unique("defaults"))
        assert created.owner is None
        assert created.config_name == ""
        assert dict(created.metadata) == {}
        assert (await store.read(created.id)) == []

    @pytest.mark.anyio
    async def test_create_session_without_id_generates_a_fresh_one(self, store: Store) -> None:
        first = await store.create_session()
        second = await store.create_session()
        assert isinstance(first.id, str)
        assert first.id
        assert first.id != second.id
        assert (await store.get_session(first.id)).id == first.id

    @pytest.mark.anyio
    async def test_duplicate_session_id_is_refused(self, store: Store) -> None:
        sid = _unique("dup")
        await store.create_session(sid, owner="first")
        with pytest.raises(StoreError):
            await store.create_session(sid, owner="second")
        assert (await store.get_session(sid)).owner == "first", "the original must be kept"

    @pytest.mark.anyio
    async def test_missing_session_raises_session_not_found(self, store: Store) -> None:
        missing = _unique("missing")
        with pytest.raises(SessionNotFound):
            await store.get_session(missing)
        with pytest.raises(SessionNotFound):
            await store.read(missing)
        with pytest.raises(SessionNotFound):
            await store.append(missing, [NewEvent("note")])
        with pytest.raises(SessionNotFound):
            await store.set_status(missing, "running")

    @pytest.mark.anyio
    async def test_set_status_changes_status_and_updated_at(self, store: Store) -> None:
        created = await store.create_session(_unique("status"))
        await anyio.sleep(_TICK)
        updated = await store.set_status(created.id, "running")
        assert updated.status == "running"
        assert updated.updated_at > created.updated_at
        assert updated.created_at == pytest.approx(created.created_at, abs=1e-3)
        fetched = await store.get_session(created.id)
        assert fetched.status == "running"
        assert fetched.updated_at == pytest.approx(updated.updated_at, abs=1e-3)
        final = await store.set_status(created.id, "completed")
        assert final.status == "completed"
        assert (await store.get_session(created.id)).status == "completed"

    @pytest.mark.anyio
    async def test_append_sets_the_status_in_the_same_transaction(self, store: Store) -> None:
        created = await store.create_session(_unique("status-append"))
        await anyio.sleep(_TICK)
        stored = await store.append(created.id, [NewEvent("run_started")], status="running")
        assert [e.seq for e in stored] == [1]
        fetched = await store.get_session(created.id)
        assert (fetched.status, fetched.last_seq) == ("running", 1)
        assert fetched.updated_at > created.updated_at
        # Without status the status stays; with it and no events, only the status moves.
        await store.append(created.id, [NewEvent("step")])
        assert (await store.get_session(created.id)).status == "running"
        await store.append(created.id, [NewEvent("run_finished")], status="completed")
        assert (await store.get_session(created.id)).status == "completed"
        assert await store.append(created.id, [], status="failed") == []
        assert (await store.get_session(created.id)).status == "failed"
        # A refused append changes neither the journal nor the status.
        lease = await store.acquire_lease(created.id, "holder", _TTL)
        with pytest.raises(FencedOut):
            await store.append(
                created.id, [NewEvent("late")], fence=lease.fence + 1, status="running"
            )
        after = await store.get_session(created.id)
        assert (after.status, after.last_seq) == ("failed", 3)

    @pytest.mark.anyio
    async def test_list_sessions_newest_updated_first(self, store: Store) -> None:
        owner = _unique("owner")
        ids = []
        for name in ("a", "b", "c"):
            ids.append((await store.create_session(_unique(name), owner=owner)).id)
            await anyio.sleep(_TICK)
        a, b, c = ids
        assert [s.id for s in await store.list_sessions(owner=owner)] == [c, b, a]
        await store.set_status(a, "running")
        assert [s.id for s in await store.list_sessions(owner=owner)] == [a, c, b]
        everyone = [s.id for s in await store.list_sessions(limit=10_000)]
        assert [x for x in everyone if x in ids] == [a, c, b]

    @pytest.mark.anyio
    async def test_list_sessions_filters_and_limits(self, store: Store) -> None:
        owner, other = _unique("owner"), _unique("other")
        mine = []
        for _ in range(3):
            mine.append((await store.create_session(_unique("mine"), owner=owner)).id)
            await anyio.sleep(_TICK)
        theirs = (await store.create_session(_unique("theirs"), owner=other)).id
        await store.set_status(mine[0], "completed")

        listed = await store.list_sessions(owner=owner)
        assert {s.id for s in listed} == set(mine)
        assert all(s.owner == owner for s in listed)
        assert [s.id for s in await store.list_sessions(owner=other)] == [theirs]

        done = await store.list_sessions(owner=owner, status="completed")
        assert [s.id for s in done] == [mine[0]]
        assert all(s.status == "completed" for s in done)
        assert [s.id for s in await store.list_sessions(owner=owner, status="created")] == [
            mine[2],
            mine[1],
        ]
        assert await store.list_sessions(owner=owner, status="failed") == []

        limited = await store.list_sessions(owner=owner, limit=2)
        assert [s.id for s in limited] == [mine[0], mine[2]]
        assert len(await store.list_sessions(limit=1)) == 1

    # -- journal -------------------------------------------------------------

    @pytest.mark.anyio
    async def test_append_numbers_events_contiguously_from_one(self, store: Store) -> None:
        sid = (await store.create_session(_unique("seq"))).id
        first = await store.append(sid, [NewEvent("a"), NewEvent("b"), NewEvent("c")])
        second = await store.append(sid, [NewEvent("d")])
        third = await store.append(sid, [NewEvent("e"), NewEvent("f")])
        for batch in (first, second, third):
            assert all(isinstance(e, JournalEvent) for e in batch)
            assert all(e.session_id == sid for e in batch)
        assert [e.seq for e in first] == [1, 2, 3]
        assert [e.seq for e in second] == [4]
        assert [e.seq for e in third] == [5, 6]
        assert [e.type for e in first + second + third] == list("abcdef")

    @pytest.mark.anyio
    async def test_append_nothing_uses_no_sequence_number(self, store: Store) -> None:
        sid = (await store.create_session(_unique("empty"))).id
        assert await store.append(sid, []) == []
        assert [e.seq for e in await store.append(sid, [NewEvent("x")])] == [1]

    @pytest.mark.anyio
    async def test_sessions_have_separate_journals(self, store: Store) -> None:
        one = (await store.create_session(_unique("one"))).id
        two = (await store.create_session(_unique("two"))).id
        await store.append(one, [NewEvent("one.a"), NewEvent("one.b")])
        appended = await store.append(two, [NewEvent("two.a")])
        assert [e.seq for e in appended] == [1]
        assert [e.type for e in await store.read(one)] == ["one.a", "one.b"]
        assert [(e.session_id, e.type) for e in await store.read(two)] == [(two, "two.a")]

    @pytest.mark.anyio
    async def test_read_after_and_limit(self, store: Store) -> None:
        sid = (await store.create_session(_unique("read"))).id
        await store.append(sid, [NewEvent(f"e{i}", {"i": i}) for i in range(1, 6)])
        assert [e.seq for e in await store.read(sid)] == [1, 2, 3, 4, 5]
        assert [e.seq for e in await store.read(sid, after=2)] == [3, 4, 5]
        assert [e.seq for e in await store.read(sid, limit=2)] == [1, 2]
        assert [e.seq for e in await store.read(sid, after=1, limit=3)] == [2, 3, 4]
        assert [e.seq for e in await store.read(sid, after=4, limit=10)] == [5]
        assert await store.read(sid, after=5) == []
        assert await store.read(sid, after=99) == []
        assert await store.read(sid, limit=0) == []
        assert [(e.type, dict(e.data)) for e in await store.read(sid, after=3)] == [
            ("e4", {"i": 4}),
            ("e5", {"i": 5}),
        ]

    @pytest.mark.anyio
    async def test_event_data_round_trips(self, store: Store) -> None:
        sid = (await store.create_session(_unique("data"))).id
        data: dict[str, Any] = {
            "text": 'naïve café — 日本語 🐍 "quoted" \\ back\nslash',
            "int": 2**53,
            "negative": -7,
            "float": 0.1,
            "bool": True,
            "null": None,
            "list": [1, "two", [3, {"four": 4}], []],
            "nested": {"deeper": {"deepest": {"k": "v"}}, "empty": {}},
            "ключ": "значение",
        }
        [appended] = await store.append(sid, [NewEvent("data", data)])
        [read] = await store.read(sid)
        assert read.type == "data"
        assert read.data == data
        assert appended.data == data

    @pytest.mark.anyio
    async def test_event_timestamps(self, store: Store) -> None:
        sid = (await store.create_session(_unique("at"))).id
        before = time.time()
        await store.append(sid, [NewEvent("a")])
        await anyio.sleep(_TICK)
        await store.append(sid, [NewEvent("b")])
        events = await store.read(sid)
        assert all(isinstance(e.at, float) for e in events)
        assert events[0].at <= events[1].at
        assert before - 300 <= events[0].at <= time.time() + 300

    @pytest.mark.anyio
    async def test_appended_data_is_a_snapshot(self, store: Store) -> None:
        # Callers reuse and mutate dicts; the journal must keep what was appended.
        sid = (await store.create_session(_unique("snapshot"))).id
        data: dict[str, Any] = {"items": [1], "meta": {"k": "before"}}
        await store.append(sid, [NewEvent("e", data)])
        data["items"].append(2)
        data["meta"]["k"] = "after"
        data["added"] = True
        [event] = await store.read(sid)
        assert event.data == {"items": [1], "meta": {"k": "before"}}

    @pytest.mark.anyio
    async def test_concurrent_appends_never_duplicate_or_skip(self, store: Store) -> None:
        sid = (await store.create_session(_unique("concurrent"))).id
        writers, batches = 8, 6
        returned: list[JournalEvent] = []

        async def writer(w: int) -> None:
            for b in range(batches):
                size = 1 + (w + b) % 3
                batch = [NewEvent("w", {"w": w, "b": b, "i": i}) for i in range(size)]
                stored = await store.append(sid, batch)
                seqs = [e.seq for e in stored]
                assert seqs == list(range(seqs[0], seqs[0] + size)), "a batch must be contiguous"
                returned.extend(stored)

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)

        total = sum(1 + (w + b) % 3 for w in range(writers) for b in range(batches))
        events = await store.read(sid)
        assert [e.seq for e in events] == list(range(1, total + 1))
        assert sorted(e.seq for e in returned) == list(range(1, total + 1))
        by_seq = {e.seq: dict(e.data) for e in returned}
        assert [dict(e.data) for e in events] == [by_seq[e.seq] for e in events]
        for w in range(writers):
            order = [(e.data["b"], e.data["i"]) for e in events if e.data["w"] == w]
            assert order == sorted(order), f"writer {w}'s events are out of order"

    @pytest.mark.anyio
    async def test_concurrent_appends_to_different_sessions(self, store: Store) -> None:
        sids = [(await store.create_session(_unique("multi"))).id for _ in range(4)]

        async def writer(sid: str) -> None:
            for i in range(10):
                await store.append(sid, [NewEvent("e", {"i": i})])

        async with anyio.create_task_group() as tg:
            for sid in sids:
                tg.start_soon(writer, sid)
        for sid in sids:
            events = await store.read(sid)
            assert [e.seq for e in events] == list(range(1, 11))
            assert [e.data["i"] for e in events] == list(range(10))

    # -- property: any sequence of appends and reads matches a list model ----

    @pytest.mark.anyio
    @settings(
        max_examples=30,
        deadline=None,
        # Each example works on fresh sessions, so sharing the store fixture
        # between examples is exactly what we want.
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(operations=_operations)
    async def test_appends_and_reads_match_a_list_model(
        self, store: Store, operations: list[tuple[Any, ...]]
    ) -> None:
        sids = [(await store.create_session(_unique("model"))).id for _ in range(2)]
        model: list[list[tuple[str, Mapping[str, Any]]]] = [[], []]
        for op in operations:
            if op[0] == "append":
                _, which, batch = op
                stored = await store.append(sids[which], batch)
                start = len(model[which])
                model[which].extend((e.type, e.data) for e in batch)
                assert [e.seq for e in stored] == list(range(start + 1, len(model[which]) + 1))
            else:
                _, which, after, limit = op
                got = await store.read(sids[which], after=after, limit=limit)
                end = None if limit is None else after + limit
                expected = model[which][after:end]
                assert [(e.type, e.data) for e in got] == expected
                assert [e.seq for e in got] == list(range(after + 1, after + 1 + len(expected)))
        for which in (0, 1):
            everything = await store.read(sids[which])
            assert [(e.type, e.data) for e in everything] == model[which]

    # -- last_seq, prefixes --------------------------------------------------

    @pytest.mark.anyio
    async def test_last_seq_follows_appends(self, store: Store) -> None:
        sid = (await store.create_session(_unique("lastseq"))).id
        assert (await store.get_session(sid)).last_seq == 0
        await store.append(sid, [NewEvent("a"), NewEvent("b")])
        assert (await store.get_session(sid)).last_seq == 2
        await store.append(sid, [])
        await store.append(sid, [NewEvent("c")])
        info = await store.get_session(sid)
        assert info.last_seq == 3
        owner_listing = await store.list_sessions(limit=10_000)
        assert [s.last_seq for s in owner_listing if s.id == sid] == [3]
        assert (await store.set_status(sid, "running")).last_seq == 3

    @pytest.mark.anyio
    async def test_session_totals_follow_appends(self, store: Store) -> None:
        """A store that keeps session totals keeps them equal to ``totals_of`` its journal
        (runs, model calls, tokens and cost of model and side calls), after every batch,
        in ``get_session``, ``list_sessions`` and ``set_status`` alike. A store that does
        not keep them says None."""
        from koboi.journal import totals_of

        sid = (await store.create_session(_unique("totals"))).id
        created = await store.get_session(sid)
        if created.totals is None:
            return  # the store does not keep totals: readers fold the journal instead
        assert created.totals.runs == 0 and created.totals.cost_usd == 0
        usage = {"input_tokens": 120, "output_tokens": 30, "requests": 1}
        await store.append(
            sid,
            [
                NewEvent("run_started", {"input": "hi", "agent": "a"}),
                NewEvent("model_call_started", {"step": 1}),
            ],
        )
        await store.append(
            sid,
            [
                NewEvent(
                    "model_call_finished",
                    {"step": 1, "response": {"usage": usage, "cost_usd": 0.25}},
                ),
                NewEvent(
                    "side_call_finished",
                    {
                        "step": 1,
                        "purpose": "summary",
                        "key": "k",
                        "response": {"usage": {"input_tokens": 7, "output_tokens": 3}},
                    },
                ),
                NewEvent("run_finished", {"outcome": "completed", "cost_usd": 0.25}),
            ],
        )
        info = await store.get_session(sid)
        expected = totals_of(await store.read(sid))
        assert info.totals is not None
        assert (info.totals.runs, info.totals.model_calls) == (1, 1)
        assert (info.totals.input_tokens, info.totals.output_tokens) == (127, 33)
        assert info.totals.cost_usd == pytest.approx(0.25)
        assert info.totals == expected or (
            info.totals.cost_usd == pytest.approx(expected.cost_usd)
            and info.totals.input_tokens == expected.input_tokens
        )
        listed = [s for s in await store.list_sessions(limit=10_000) if s.id == sid]
        assert [s.totals for s in listed] == [info.totals]
        assert (await store.set_status(sid, "completed")).totals == info.totals

    @pytest.mark.anyio
    async def test_append_moves_updated_at(self, store: Store) -> None:
        created = await store.create_session(_unique("touch"))
        await anyio.sleep(_TICK)
        await store.append(created.id, [NewEvent("a")])
        assert (await store.get_session(created.id)).updated_at > created.updated_at

    @pytest.mark.anyio
    async def test_match_sessions_by_prefix(self, store: Store) -> None:
        stem = _unique("match")
        ids = [f"{stem}-a1", f"{stem}-a2", f"{stem}-b1"]
        for sid in ids:
            await store.create_session(sid)
        assert sorted(await store.match_sessions(f"{stem}-a")) == ids[:2]
        assert await store.match_sessions(f"{stem}-b") == [ids[2]]
        assert await store.match_sessions(ids[0]) == [ids[0]]
        assert await store.match_sessions(f"{stem}-c") == []
        assert len(await store.match_sessions(stem, limit=2)) == 2
        # Prefix matching is exact: case matters and LIKE wildcards are literal.
        assert await store.match_sessions(stem.upper()) == []
        assert await store.match_sessions(f"{stem}-_1") == []
        assert await store.match_sessions(f"{stem}%") == []

    @pytest.mark.anyio
    async def test_match_sessions_with_wildcard_characters_in_ids(self, store: Store) -> None:
        stem = _unique("wild")
        odd = [f"{stem}_x%y", f"{stem}-x%y", f"{stem}\\z"]
        for sid in odd:
            await store.create_session(sid)
        assert await store.match_sessions(f"{stem}_") == [odd[0]]
        assert await store.match_sessions(f"{stem}-x%") == [odd[1]]
        assert await store.match_sessions(f"{stem}\\") == [odd[2]]

    @pytest.mark.anyio
    async def test_resolve_session_by_id_prefix_and_last(self, store: Store) -> None:
        stem = _unique("resolve")
        one = (await store.create_session(f"{stem}-one")).id
        await anyio.sleep(_TICK)
        two = (await store.create_session(f"{stem}-two")).id
        assert (await store.resolve_session(one)).id == one
        assert (await store.resolve_session(f"{stem}-o")).id == one
        assert (await store.resolve_session(f"{stem}-tw")).id == two
        with pytest.raises(SessionNotFound, match="ambiguous"):
            await store.resolve_session(f"{stem}-")
        with pytest.raises(SessionNotFound, match="no session"):
            await store.resolve_session(f"{stem}-three")
        with pytest.raises(SessionNotFound):
            await store.resolve_session("")
        await anyio.sleep(_TICK)
        await store.set_status(one, "running")
        assert (await store.resolve_session("last")).id == one

    # -- leases and fencing --------------------------------------------------

    @pytest.mark.anyio
    async def test_acquire_free_session(self, store: Store) -> None:
        sid = (await store.create_session(_unique("lease"))).id
        before = time.time()
        lease = await store.acquire_lease(sid, "worker-a", 30)
        assert isinstance(lease, Lease)
        assert lease.session_id == sid
        assert lease.holder == "worker-a"
        assert lease.fence >= 1
        assert before + 29 <= lease.expires_at <= time.time() + 31

    @pytest.mark.anyio
    async def test_acquire_missing_session(self, store: Store) -> None:
        with pytest.raises(SessionNotFound):
            await store.acquire_lease(_unique("nolease"), "worker-a", 30)

    @pytest.mark.anyio
    async def test_same_holder_reacquires_with_the_same_fence(self, store: Store) -> None:
        sid = (await store.create_session(_unique("lease"))).id
        first = await store.acquire_lease(sid, "worker-a", 30)
        again = await store.acquire_lease(sid, "worker-a", 60)
        assert again.fence == first.fence
        assert again.expires_at > first.expires_at

    @pytest.mark.anyio
    async def test_other_holder_waits_for_expiry_then_takes_over(self, store: Store) -> None:
        sid = (await store.create_session(_unique("lease"))).id
        first = await store.acquire_lease(sid, "worker-a", _TTL)
        with pytest.raises(LeaseHeld) as held:
            await store.acquire_lease(sid, "worker-b", 30)
        assert held.value.holder == "worker-a"
        assert "worker-a" in str(held.value)
        await anyio.sleep(_TTL + 0.1)
        taken = await store.acquire_lease(sid, "worker-b", 30)
        assert taken.holder == "worker-b"
        assert taken.fence == first.fence + 1
        with pytest.raises(LeaseHeld) as held_again:
            await store.acquire_lease(sid, "worker-a", 30)
        assert held_again.value.holder == "worker-b"

    @pytest.mark.anyio
    async def test_stale_fence_writes_nothing(self, store: Store) -> None:
        sid = (await store.create_session(_unique("zombie"))).id
        zombie = await store.acquire_lease(sid, "zombie", _TTL)
        await store.append(sid, [NewEvent("by_zombie")], fence=zombie.fence)
        await store.set_status(sid, "running", fence=zombie.fence)
        await anyio.sleep(_TTL + 0.1)
        heir = await store.acquire_lease(sid, "heir", 30)
        before = await store.get_session(sid)

        with pytest.raises(FencedOut):
            await store.append(sid, [NewEvent("late"), NewEvent("later")], fence=zombie.fence)
        with pytest.raises(FencedOut):
            await store.set_status(sid, "failed", fence=zombie.fence)
        with pytest.raises(FencedOut):
            await store.renew_lease(zombie, 30)

        assert [e.type for e in await store.read(sid)] == ["by_zombie"]
        after = await store.get_session(sid)
        assert after.status == "running"
        assert after.last_seq == before.last_seq == 1
        # The heir's writes go through, numbered after the zombie's last one.
        written = await store.append(sid, [NewEvent("by_heir")], fence=heir.fence)
        assert [e.seq for e in written] == [2]
        assert (await store.set_status(sid, "completed", fence=heir.fence)).status == "completed"

    @pytest.mark.anyio
    async def test_fence_without_any_lease_is_refused(self, store: Store) -> None:
        sid = (await store.create_session(_unique("nolease"))).id
        with pytest.raises(FencedOut):
            await store.append(sid, [NewEvent("x")], fence=1)
        assert await store.read(sid) == []

    @pytest.mark.anyio
    async def test_renew_extends_a_lease_still_held(self, store: Store) -> None:
        sid = (await store.create_session(_unique("renew"))).id
        lease = await store.acquire_lease(sid, "worker-a", _TTL)
        renewed = await store.renew_lease(lease, 30)
        assert renewed.fence == lease.fence
        assert renewed.holder == "worker-a"
        assert renewed.expires_at > lease.expires_at
        await anyio.sleep(_TTL + 0.1)
        with pytest.raises(LeaseHeld):
            await store.acquire_lease(sid, "worker-b", 30)
        await store.append(sid, [NewEvent("still mine")], fence=renewed.fence)

    @pytest.mark.anyio
    async def test_release_makes_the_session_free_at_once(self, store: Store) -> None:
        sid = (await store.create_session(_unique("release"))).id
        lease = await store.acquire_lease(sid, "worker-a", 30)
        await store.release_lease(lease)
        taken = await store.acquire_lease(sid, "worker-b", 30)
        assert taken.fence == lease.fence + 1
        with pytest.raises(FencedOut):
            await store.append(sid, [NewEvent("x")], fence=lease.fence)

    @pytest.mark.anyio
    async def test_get_lease_reports_the_current_holder(self, store: Store) -> None:
        sid = (await store.create_session(_unique("get-lease"))).id
        assert await store.get_lease(sid) is None
        lease = await store.acquire_lease(sid, "worker-a", 30)
        seen = await store.get_lease(sid)
        assert seen is not None
        assert (seen.holder, seen.fence) == ("worker-a", lease.fence)
        assert abs(seen.expires_at - lease.expires_at) < 1.0
        await store.release_lease(lease)
        released = await store.get_lease(sid)
        assert released is not None and released.expires_at <= time.time()
        with pytest.raises(SessionNotFound):
            await store.get_lease(_unique("missing"))

    @pytest.mark.anyio
    async def test_take_over_from_a_dead_holder_skips_the_wait(self, store: Store) -> None:
        sid = (await store.create_session(_unique("take-over"))).id
        dead = await store.acquire_lease(sid, "dead-worker", 3600)
        with pytest.raises(LeaseHeld):
            await store.acquire_lease(sid, "rescuer", 30, take_over_from="someone-else")
        taken = await store.acquire_lease(sid, "rescuer", 30, take_over_from="dead-worker")
        assert taken.fence == dead.fence + 1
        # The compare-and-set respects whoever holds it now.
        with pytest.raises(LeaseHeld):
            await store.acquire_lease(sid, "late", 30, take_over_from="dead-worker")
        with pytest.raises(FencedOut):
            await store.append(sid, [NewEvent("x")], fence=dead.fence)

    @pytest.mark.anyio
    async def test_release_after_takeover_is_a_no_op(self, store: Store) -> None:
        sid = (await store.create_session(_unique("release"))).id
        old = await store.acquire_lease(sid, "worker-a", _TTL)
        await anyio.sleep(_TTL + 0.1)
        new = await store.acquire_lease(sid, "worker-b", 30)
        await store.release_lease(old)
        with pytest.raises(LeaseHeld):
            await store.acquire_lease(sid, "worker-c", 30)
        await store.append(sid, [NewEvent("x")], fence=new.fence)

    @pytest.mark.anyio
    async def test_fences_only_grow_across_hand_overs(self, store: Store) -> None:
        sid = (await store.create_session(_unique("fences"))).id
        fences = []
        for holder in ("a", "b", "a", "c"):
            lease = await store.acquire_lease(sid, holder, 30)
            fences.append(lease.fence)
            await store.release_lease(lease)
        assert fences == sorted(fences)
        assert len(set(fences)) == len(fences)

    @pytest.mark.anyio
    async def test_concurrent_acquirers_exactly_one_wins(self, store: Store) -> None:
        sid = (await store.create_session(_unique("race"))).id
        won: list[Lease] = []
        refused: list[str] = []

        async def contender(name: str) -> None:
            try:
                won.append(await store.acquire_lease(sid, name, 30))
            except LeaseHeld as exc:
                refused.append(exc.holder)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(contender, f"worker-{i}")
        assert len(won) == 1
        assert refused == [won[0].holder] * 5

    @pytest.mark.anyio
    async def test_leases_are_per_session(self, store: Store) -> None:
        one = (await store.create_session(_unique("per"))).id
        two = (await store.create_session(_unique("per"))).id
        await store.acquire_lease(one, "worker-a", 30)
        other = await store.acquire_lease(two, "worker-b", 30)
        assert other.holder == "worker-b"

    # -- the audit trail -------------------------------------------------------

    @pytest.mark.anyio
    async def test_audit_records_are_written_with_the_events(self, store: Store) -> None:
        sid = (await store.create_session(_unique("audit"))).id
        other = (await store.create_session(_unique("audit"))).id
        await store.append(sid, [NewEvent("a")], audit=[{"phase": "before", "n": 1}])
        await store.append(other, [NewEvent("b")], audit=[{"phase": "before", "n": 9}])
        await store.append(sid, [], audit=[{"phase": "decision", "n": 2}, {"phase": "after"}])

        mine = await store.read_audit(sid)
        assert [dict(e.data) for e in mine] == [
            {"phase": "before", "n": 1},
            {"phase": "decision", "n": 2},
            {"phase": "after"},
        ]
        assert all(e.session_id == sid for e in mine)
        assert [e.id for e in mine] == sorted(e.id for e in mine)
        assert len({e.id for e in mine}) == 3
        # Following the trail: only what came after the given id.
        assert [dict(e.data) for e in await store.read_audit(sid, after=mine[0].id)] == [
            {"phase": "decision", "n": 2},
            {"phase": "after"},
        ]
        assert len(await store.read_audit(sid, limit=1)) == 1
        everyone = await store.read_audit(after=mine[0].id - 1)
        assert {e.session_id for e in everyone} >= {sid, other}

    @pytest.mark.anyio
    async def test_a_fenced_out_append_writes_no_audit_record(self, store: Store) -> None:
        sid = (await store.create_session(_unique("audit-fence"))).id
        zombie = await store.acquire_lease(sid, "zombie", _TTL)
        await anyio.sleep(_TTL + 0.1)
        await store.acquire_lease(sid, "heir", 30)
        with pytest.raises(FencedOut):
            await store.append(sid, [NewEvent("late")], fence=zombie.fence, audit=[{"x": 1}])
        assert await store.read_audit(sid) == []
        # Control: without the stale fence the same append writes both.
        await store.append(sid, [NewEvent("ok")], audit=[{"x": 1}])
        assert [dict(e.data) for e in await store.read_audit(sid)] == [{"x": 1}]

    @pytest.mark.anyio
    async def test_audit_to_a_missing_session_writes_nothing(self, store: Store) -> None:
        ghost = _unique("ghost")
        with pytest.raises(SessionNotFound):
            await store.append(ghost, [NewEvent("a")], audit=[{"x": 1}])
        assert await store.read_audit(ghost) == []


class KeyedRecordsContract:
    """Behaviour of the keyed-records capability (:class:`~koboi.store.KeyedRecords`):
    records with expiry, atomic creation, counters, purging.

    **Required fixture** ``store``: an *opened* store with the capability (see
    :class:`JournalStoreContract` for sharing a store between tests).
    """

    @pytest.fixture(autouse=True)
    def _has_the_capability(self, store: Any) -> None:
        assert isinstance(unwrap(store), KeyedRecords), (
            f"{type(store).__name__} does not implement koboi.store.KeyedRecords"
        )

    # -- keyed records ---------------------------------------------------------

    @pytest.mark.anyio
    async def test_record_round_trip_replace_and_delete(self, store: KeyedRecords) -> None:
        kind, key = _unique("kind"), "k1"
        assert await store.record_get(kind, key) is None
        await store.record_put(kind, key, {"a": [1, "ü"], "b": None})
        assert await store.record_get(kind, key) == {"a": [1, "ü"], "b": None}
        await store.record_put(kind, key, {"a": 2})
        assert await store.record_get(kind, key) == {"a": 2}
        assert await store.record_get(_unique("kind"), key) is None  # kinds are separate
        assert await store.record_delete(kind, key) is True
        assert await store.record_delete(kind, key) is False
        assert await store.record_get(kind, key) is None

    @pytest.mark.anyio
    async def test_records_expire(self, store: KeyedRecords) -> None:
        kind = _unique("expiring")
        await store.record_put(kind, "short", {"v": 1}, expires_at=time.time() + _TTL)
        await store.record_put(kind, "long", {"v": 2}, expires_at=time.time() + 60)
        await store.record_put(kind, "never", {"v": 3})
        assert [k for k, _ in await store.record_list(kind)] == ["long", "never", "short"]
        await anyio.sleep(_TTL + 0.1)
        assert await store.record_get(kind, "short") is None
        assert await store.record_list(kind) == [("long", {"v": 2}), ("never", {"v": 3})]
        # An expired record can still be deleted (it is there until someone does).
        assert await store.record_delete(kind, "short") is True

    @pytest.mark.anyio
    async def test_record_list_by_prefix_takes_wildcards_literally(
        self, store: KeyedRecords
    ) -> None:
        kind = _unique("listing")
        for key in ("a/1", "a/2", "a_x", "a%y", "b/1"):
            await store.record_put(kind, key, {"key": key})
        assert [k for k, _ in await store.record_list(kind, prefix="a/")] == ["a/1", "a/2"]
        assert [k for k, _ in await store.record_list(kind, prefix="a_")] == ["a_x"]
        assert [k for k, _ in await store.record_list(kind, prefix="a%")] == ["a%y"]
        assert len(await store.record_list(kind)) == 5

    @pytest.mark.anyio
    async def test_record_data_is_a_copy(self, store: KeyedRecords) -> None:
        kind = _unique("copy")
        data: dict[str, Any] = {"items": [1]}
        await store.record_put(kind, "k", data)
        data["items"].append(2)
        got = await store.record_get(kind, "k")
        assert got == {"items": [1]}
        assert got is not None
        got["items"].append(3)
        assert await store.record_get(kind, "k") == {"items": [1]}

    # -- counters ----------------------------------------------------------------

    @pytest.mark.anyio
    async def test_counter_adds_and_restarts_after_expiry(self, store: KeyedRecords) -> None:
        key = _unique("counter")
        window = time.time() + _TTL
        assert await store.counter_add(key, expires_at=window) == 1
        assert await store.counter_add(key, 2, expires_at=time.time() + 60) == 3
        await anyio.sleep(_TTL + 0.1)
        # The first expiry was kept, so the counter starts again.
        assert await store.counter_add(key, expires_at=time.time() + 60) == 1
        forever = _unique("counter")
        assert await store.counter_add(forever, 5, expires_at=None) == 5
        assert await store.counter_add(forever, -2, expires_at=None) == 3

    @pytest.mark.anyio
    async def test_concurrent_counter_adds_all_count(self, store: KeyedRecords) -> None:
        key = _unique("race")

        async def add() -> None:
            await store.counter_add(key, expires_at=time.time() + 60)

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(add)
        assert await store.counter_add(key, 0, expires_at=None) == 20

    @pytest.mark.anyio
    async def test_record_create_succeeds_once_until_the_record_expires(
        self, store: KeyedRecords
    ) -> None:
        kind = _unique("claims")
        assert await store.record_create(kind, "k", {"by": "a"}, expires_at=time.time() + _TTL)
        assert not await store.record_create(kind, "k", {"by": "b"})
        assert await store.record_get(kind, "k") == {"by": "a"}
        await anyio.sleep(_TTL + 0.1)
        assert await store.record_create(kind, "k", {"by": "c"})
        assert await store.record_get(kind, "k") == {"by": "c"}

    @pytest.mark.anyio
    async def test_concurrent_record_creates_have_one_winner(self, store: KeyedRecords) -> None:
        kind = _unique("race")
        wins: list[int] = []

        async def create(n: int) -> None:
            if await store.record_create(kind, "k", {"n": n}):
                wins.append(n)

        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(create, n)
        assert len(wins) == 1
        assert await store.record_get(kind, "k") == {"n": wins[0]}

    @pytest.mark.anyio
    async def test_purging_drops_expired_records_and_counters_only(
        self, store: KeyedRecords
    ) -> None:
        kind = _unique("purge")
        key = _unique("counter")
        await store.record_put(kind, "old", {"n": 1}, expires_at=time.time() - 1)
        await store.record_put(kind, "live", {"n": 2}, expires_at=time.time() + 60)
        await store.record_put(kind, "forever", {"n": 3})
        await store.counter_add(key + "-old", expires_at=time.time() + _TTL)
        await store.counter_add(key + "-live", expires_at=time.time() + 60)
        await anyio.sleep(_TTL + 0.1)
        removed = await store.purge_expired()
        assert removed >= 2  # at least this test's expired record and counter
        assert await store.record_list(kind) == [("forever", {"n": 3}), ("live", {"n": 2})]
        assert await store.counter_add(key + "-live", 0, expires_at=None) == 1
        # A purged counter starts again from zero, as an expired one does.
        assert await store.counter_add(key + "-old", 0, expires_at=None) == 0


class JobQueueContract:
    """Behaviour of the job-queue capability (:class:`~koboi.store.JobQueue`): fenced,
    exclusive claims, idempotency keys, outbox records written with a status.

    **Required fixture** ``store``: an *opened* store with the capability (see
    :class:`JournalStoreContract` for sharing a store between tests).
    """

    @pytest.fixture(autouse=True)
    def _has_the_capability(self, store: Any) -> None:
        assert isinstance(unwrap(store), JobQueue), (
            f"{type(store).__name__} does not implement koboi.store.JobQueue"
        )

    # -- jobs ----------------------------------------------------------------------

    async def _drain(self, store: JobQueue) -> None:
        """Claim and finish whatever other tests left queued (a shared store)."""
        while (job := await store.claim_job("drainer", 60)) is not None:
            await store.update_job(job, status="failed", result={"drained": True})

    @pytest.mark.anyio
    async def test_a_job_is_created_queued_and_found_by_owner_and_status(
        self, store: JobQueue
    ) -> None:
        owner = _unique("owner")
        job, created = await store.create_job(
            session_id="s1", owner=owner, request={"input": "go", "n": [1]}
        )
        assert created and job.status == "queued" and job.id.startswith("job_")
        assert dict(job.request) == {"input": "go", "n": [1]}
        assert await store.get_job(job.id) == job
        other, _ = await store.create_job(session_id="s2", owner=owner, request={})
        assert [j.id for j in await store.list_jobs(owner=owner)] == [other.id, job.id]
        assert await store.list_jobs(owner=_unique("nobody")) == []
        assert [j.id for j in await store.list_jobs(owner=owner, status="queued", limit=1)] == [
            other.id
        ]
        with pytest.raises(JobNotFound):
            await store.get_job("job_missing")

    @pytest.mark.anyio
    async def test_an_idempotency_key_gives_back_the_same_job(self, store: JobQueue) -> None:
        owner = _unique("owner")
        first, created = await store.create_job(
            session_id="s", owner=owner, request={"a": 1}, idempotency_key="k1", request_hash="h1"
        )
        again, created_again = await store.create_job(
            session_id="s-other",
            owner=owner,
            request={"a": 1},
            idempotency_key="k1",
            request_hash="h1",
        )
        assert created and not created_again and again.id == first.id
        found = await store.find_job(owner=owner, idempotency_key="k1")
        assert found is not None and found.id == first.id
        assert await store.find_job(owner=owner, idempotency_key="k2") is None
        assert await store.find_job(owner=_unique("owner"), idempotency_key="k1") is None
        with pytest.raises(IdempotencyConflict):
            await store.create_job(
                session_id="s",
                owner=owner,
                request={"a": 2},
                idempotency_key="k1",
                request_hash="h2",
            )
        # Keys are scoped to the owner.
        theirs, created_theirs = await store.create_job(
            session_id="s",
            owner=_unique("owner"),
            request={},
            idempotency_key="k1",
            request_hash="h9",
        )
        assert created_theirs and theirs.id != first.id

    @pytest.mark.anyio
    async def test_concurrent_requests_with_one_key_create_one_job(self, store: JobQueue) -> None:
        owner = _unique("owner")
        made: list[tuple[str, bool]] = []

        async def create() -> None:
            job, created = await store.create_job(
                session_id="s", owner=owner, request={}, idempotency_key="same", request_hash="h"
            )
            made.append((job.id, created))

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(create)
        assert len({job_id for job_id, _ in made}) == 1
        assert sum(created for _, created in made) == 1
        assert len(await store.list_jobs(owner=owner)) == 1

    @pytest.mark.anyio
    async def test_claims_are_exclusive_fenced_and_taken_over_after_expiry(
        self, store: JobQueue
    ) -> None:
        await self._drain(store)
        job, _ = await store.create_job(session_id="s", owner=_unique("o"), request={})
        first = await store.claim_job("node-a", _TTL)
        assert first is not None and first.id == job.id
        assert (first.status, first.holder, first.fence, first.attempts) == (
            "running",
            "node-a",
            1,
            1,
        )
        assert await store.claim_job("node-b", _TTL) is None  # held
        renewed = await store.renew_job(first, _TTL)
        assert renewed.lease_expires_at is not None and first.lease_expires_at is not None
        assert renewed.lease_expires_at >= first.lease_expires_at
        await anyio.sleep(_TTL + 0.1)
        second = await store.claim_job("node-b", 30)
        assert second is not None and second.id == job.id
        assert (second.holder, second.fence, second.attempts) == ("node-b", 2, 2)
        # The first holder is fenced out of every write.
        with pytest.raises(FencedOut):
            await store.renew_job(first, 30)
        with pytest.raises(FencedOut):
            await store.update_job(first, status="completed", result={"by": "a"})
        waiting = await store.update_job(second, status="awaiting_approval")
        assert waiting.status == "awaiting_approval" and waiting.holder == "node-b"
        done = await store.update_job(waiting, status="completed", result={"output": "ok"})
        assert (done.status, done.holder, dict(done.result or {})) == (
            "completed",
            None,
            {"output": "ok"},
        )
        assert await store.claim_job("node-c", 30) is None  # finished jobs are never claimed
        with pytest.raises(FencedOut):
            await store.update_job(waiting, status="failed")

    @pytest.mark.anyio
    async def test_concurrent_claimers_never_share_a_job(self, store: JobQueue) -> None:
        await self._drain(store)
        owner = _unique("o")
        for _ in range(5):
            await store.create_job(session_id="s", owner=owner, request={})
        claimed: list[str] = []

        async def worker(name: str) -> None:
            while (job := await store.claim_job(name, 30)) is not None:
                claimed.append(job.id)

        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(worker, f"w{n}")
        assert len(claimed) == len(set(claimed)) == 5

    @pytest.mark.anyio
    async def test_cancelling_a_queued_and_a_running_job(self, store: JobQueue) -> None:
        await self._drain(store)
        owner = _unique("o")
        running, _ = await store.create_job(session_id="s", owner=owner, request={"n": 1})
        claimed = await store.claim_job("node", 30)
        assert claimed is not None and claimed.id == running.id
        queued, _ = await store.create_job(session_id="s", owner=owner, request={"n": 2})
        cancelled = await store.cancel_job(queued.id)
        assert cancelled.status == "cancelled"
        assert await store.claim_job("node-2", 30) is None  # a cancelled job is not claimed
        asked = await store.cancel_job(running.id)
        assert asked.status == "running" and asked.cancel_requested
        assert (await store.renew_job(claimed, 30)).cancel_requested  # the holder learns it
        finished = await store.update_job(claimed, status="cancelled")
        assert (await store.cancel_job(running.id)).status == finished.status == "cancelled"
        with pytest.raises(JobNotFound):
            await store.cancel_job("job_missing")

    @pytest.mark.anyio
    async def test_a_released_job_is_claimed_at_once_and_its_holder_fenced_out(
        self, store: JobQueue
    ) -> None:
        await self._drain(store)
        job, _ = await store.create_job(session_id="s", owner=_unique("o"), request={})
        held = await store.claim_job("node-a", 60)
        assert held is not None and held.id == job.id
        assert await store.claim_job("node-b", 60) is None  # held for a minute
        released = await store.release_job(held)
        assert released.status == "running" and released.fence == held.fence
        taken = await store.claim_job("node-b", 60)
        assert taken is not None and taken.id == job.id
        assert (taken.holder, taken.fence, taken.attempts) == ("node-b", 2, 2)
        with pytest.raises(FencedOut):
            await store.release_job(held)  # the old holder has nothing left to give up
        await store.update_job(taken, status="completed", result={})
        with pytest.raises(FencedOut):
            await store.release_job(taken)  # nor has anyone once the job is finished

    @pytest.mark.anyio
    async def test_records_given_with_a_job_update_are_written_with_it_or_not_at_all(
        self, store: JobQueue
    ) -> None:
        assert isinstance(store, KeyedRecords), "a job queue has keyed records too (the outbox)"
        await self._drain(store)
        kind = _unique("outbox")
        job, _ = await store.create_job(session_id="s", owner=_unique("o"), request={})
        held = await store.claim_job("node-a", _TTL)
        assert held is not None and held.id == job.id
        await anyio.sleep(_TTL + 0.1)
        other = await store.claim_job("node-b", 60)
        assert other is not None and other.id == job.id
        # A fenced-out update writes neither the status nor its records.
        with pytest.raises(FencedOut):
            await store.update_job(
                held, status="completed", result={"by": "a"}, records=[(kind, "a", {"n": 1})]
            )
        assert await store.record_get(kind, "a") is None
        assert (await store.get_job(job.id)).status == "running"
        done = await store.update_job(
            other,
            status="completed",
            result={"by": "b"},
            records=[(kind, "b1", {"n": 2}), (kind, "b2", {"list": [1, 2]})],
        )
        assert done.status == "completed"
        assert await store.record_list(kind) == [("b1", {"n": 2}), ("b2", {"list": [1, 2]})]

    @pytest.mark.anyio
    async def test_a_job_waiting_for_input_is_never_claimed_until_it_is_requeued(
        self, store: JobQueue
    ) -> None:
        assert isinstance(store, KeyedRecords), "a job queue has keyed records too"
        await self._drain(store)
        kind = _unique("reply")
        job, _ = await store.create_job(session_id="s", owner=_unique("o"), request={})
        held = await store.claim_job("node-a", 60)
        assert held is not None and held.id == job.id
        waiting = await store.update_job(held, status="waiting_input")
        await store.release_job(waiting)
        await anyio.sleep(0.05)
        assert await store.claim_job("node-b", 60) is None  # waits for its input
        read = await store.get_job(job.id)
        queued = await store.requeue_job(read, records=[(kind, "r", {"reply": "yes"})])
        assert queued.status == "queued" and queued.holder is None
        assert await store.record_get(kind, "r") == {"reply": "yes"}
        # A second reply from the same stale read loses: nothing is written twice.
        with pytest.raises(FencedOut):
            await store.requeue_job(read, records=[(kind, "again", {"reply": "no"})])
        assert await store.record_get(kind, "again") is None
        again = await store.claim_job("node-b", 60)
        assert again is not None and again.id == job.id and again.fence > held.fence
        await store.update_job(again, status="completed", result={})


class ResponseCacheContract:
    """Behaviour of the response-cache capability (:class:`~koboi.store.ResponseCache`).

    **Required fixture** ``store``: an *opened* store with the capability (see
    :class:`JournalStoreContract` for sharing a store between tests).
    """

    @pytest.fixture(autouse=True)
    def _has_the_capability(self, store: Any) -> None:
        assert isinstance(unwrap(store), ResponseCache), (
            f"{type(store).__name__} does not implement koboi.store.ResponseCache"
        )

    # -- the response cache ------------------------------------------------------

    @pytest.mark.anyio
    async def test_cache_miss_is_none(self, store: ResponseCache) -> None:
        assert await store.cache_get(_unique("absent-key")) is None

    @pytest.mark.anyio
    async def test_cache_round_trip(self, store: ResponseCache) -> None:
        key = _unique("key")
        entry = {
            "response": {"message": {"role": "assistant", "content": "Bonjour ☀️ 日本"}},
            "provider": {"provider": "openai", "model": "gpt-4o", "options": {"seed": 7}},
            "created_at": 1700000000.25,
        }
        await store.cache_put(key, entry)
        assert await store.cache_get(key) == entry
        assert key in await store.cache_keys()

    @pytest.mark.anyio
    async def test_cache_put_replaces(self, store: ResponseCache) -> None:
        key = _unique("key")
        await store.cache_put(key, {"response": {"n": 1}})
        await store.cache_put(key, {"response": {"n": 2}})
        assert await store.cache_get(key) == {"response": {"n": 2}}
        assert (await store.cache_keys()).count(key) == 1

    @pytest.mark.anyio
    async def test_cache_entries_are_copies(self, store: ResponseCache) -> None:
        key = _unique("key")
        entry: dict[str, Any] = {"response": {"items": [1, 2]}}
        await store.cache_put(key, entry)
        entry["response"]["items"].append(3)
        got = await store.cache_get(key)
        assert got == {"response": {"items": [1, 2]}}
        assert got is not None
        got["response"]["items"].append(4)
        assert await store.cache_get(key) == {"response": {"items": [1, 2]}}

    @pytest.mark.anyio
    async def test_concurrent_cache_puts_of_one_key_all_succeed(self, store: ResponseCache) -> None:
        key = _unique("key")

        async def put(n: int) -> None:
            await store.cache_put(key, {"response": {"n": n}})

        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(put, n)
        got = await store.cache_get(key)
        assert got is not None and got["response"]["n"] in range(5)

    @pytest.mark.anyio
    async def test_cache_keys_are_sorted(self, store: ResponseCache) -> None:
        keys = await store.cache_keys()
        assert keys == sorted(keys)


class StoreContract(
    JournalStoreContract, KeyedRecordsContract, JobQueueContract, ResponseCacheContract
):
    """The whole suite, for a store with every capability (koboi-store-sql, the memory
    store). A store with fewer capabilities subclasses :class:`JournalStoreContract` and
    the capability suites it implements."""
