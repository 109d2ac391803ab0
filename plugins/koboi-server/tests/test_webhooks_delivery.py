"""Durable deliveries end to end: a real SQLite store, real receivers on 127.0.0.1.

The receivers are :class:`koboi_testing.wire.WireServer` instances (a real
HTTP/1.1 server with scripted replies). Receivers on loopback are reachable
only because every dispatcher here allow-lists ``127.0.0.0/8``; that the
allow-list is what lets them through is proven in test_webhooks_urls.py.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.errors import StoreError
from koboi.store import InMemoryStore, Store
from koboi_server.webhooks import (
    Backoff,
    WebhookDelivery,
    WebhookDispatcher,
    WebhookError,
    WebhookSettings,
    WebhookVerificationError,
    generate_secret,
    verify,
)
from koboi_store_sql import SQLStore
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

LOOPBACK = ["127.0.0.0/8"]
FAST = Backoff(base=0.05, factor=1.0, cap=0.05, jitter=0.0)
SECRET = generate_secret()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'koboi.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    async with SQLStore(db_url) as opened:
        yield opened


@pytest.fixture
def receiver() -> Iterator[WireServer]:
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        yield server


def dispatcher_on(store: Store, **options: Any) -> WebhookDispatcher:
    options.setdefault("allow", LOOPBACK)
    options.setdefault("backoff", FAST)
    options.setdefault("timeout", 5.0)
    return WebhookDispatcher(store, **options)


async def until_finished(
    dispatcher: WebhookDispatcher, delivery_id: str, *, within: float = 10.0
) -> WebhookDelivery:
    """Run passes until the delivery is no longer pending."""
    with anyio.fail_after(within):
        while True:
            await dispatcher.deliver_due()
            found = await dispatcher.get(delivery_id)
            assert found is not None
            if found.status != "pending":
                return found
            await anyio.sleep(0.02)


async def arrival(receiver: WireServer, *, within: float = 5.0) -> None:
    """Wait until the receiver has received a request."""
    with anyio.fail_after(within):
        while True:
            if receiver.requests:
                return
            await anyio.sleep(0.01)


# -- what a receiver gets -------------------------------------------------------


async def test_a_delivery_arrives_signed_and_verifies_with_the_shipped_verifier(
    store: Store, receiver: WireServer
) -> None:
    dispatcher = dispatcher_on(store)
    payload = {"job_id": "job_1", "status": "completed", "note": "naïve ✓"}
    delivery_id = await dispatcher.enqueue(
        f"{receiver.url}/hooks/koboi?x=1", SECRET, "job.finished", payload
    )
    assert delivery_id.startswith("msg_")

    attempted = await dispatcher.deliver_due()

    assert [d.id for d in attempted] == [delivery_id]
    [request] = receiver.requests
    assert request.method == "POST"
    assert request.path == "/hooks/koboi?x=1"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == delivery_id
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 10
    event = verify(SECRET, request.headers, request.body)
    assert event["type"] == "job.finished"
    assert event["data"] == payload
    assert event["timestamp"].endswith("Z")

    done = await dispatcher.get(delivery_id)
    assert done is not None
    assert (done.status, done.attempts, done.last_status_code) == ("delivered", 1, 200)
    assert done.delivered_at is not None and done.next_attempt_at is None
    assert done.payload == payload


async def test_the_delivered_request_fails_verification_when_tampered_or_stale(
    store: Store, receiver: WireServer
) -> None:
    dispatcher = dispatcher_on(store)
    await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {"job_id": "j"})
    await dispatcher.deliver_due()
    [request] = receiver.requests
    stamp = int(request.headers["webhook-timestamp"])

    tampered = request.body.replace(b'"j"', b'"k"')
    assert tampered != request.body
    with pytest.raises(WebhookVerificationError) as bad:
        verify(SECRET, request.headers, tampered, now=stamp)
    assert bad.value.reason == "bad_signature"

    with pytest.raises(WebhookVerificationError) as stale:
        verify(SECRET, request.headers, request.body, now=stamp + 301)
    assert stale.value.reason == "stale"

    # Control: the untouched request, on time.
    assert verify(SECRET, request.headers, request.body, now=stamp + 299)["data"] == {"job_id": "j"}


async def test_rotation_sends_one_signature_per_secret(store: Store, receiver: WireServer) -> None:
    old, new = generate_secret(), generate_secret()
    dispatcher = dispatcher_on(store)
    await dispatcher.enqueue(receiver.url, [new, old], "job.finished", {})
    await dispatcher.deliver_due()
    [request] = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verify(old, request.headers, request.body)
    assert verify(new, request.headers, request.body)


# -- retries --------------------------------------------------------------------


async def test_a_receiver_failing_twice_gets_the_same_delivery_three_times(
    store: Store, receiver: WireServer
) -> None:
    receiver.push(
        Reply.json({"error": "down"}, status=500),
        Reply.raw("busy", status=503, content_type="text/plain"),
        Reply.json({"ok": True}),
    )
    dispatcher = dispatcher_on(store)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {"n": 1})

    first = await dispatcher.deliver_due()
    assert first[0].status == "pending"
    assert first[0].last_error == 'HTTP 500 Internal Server Error: {"error": "down"}'
    done = await until_finished(dispatcher, delivery_id)

    assert len(receiver.requests) == 3
    assert {r.headers["webhook-id"] for r in receiver.requests} == {delivery_id}
    assert len({r.body for r in receiver.requests}) == 1  # the very same body every time
    for request in receiver.requests:
        assert verify(SECRET, request.headers, request.body)["data"] == {"n": 1}
    assert done.status == "delivered"
    assert done.attempts == 3
    assert [a.status_code for a in done.history] == [500, 503, 200]
    assert [a.number for a in done.history] == [1, 2, 3]
    assert all(a.holder == dispatcher.holder for a in done.history)
    assert done.last_error is None

    # Delivered means done: later passes send nothing.
    assert await dispatcher.deliver_due() == []
    assert len(receiver.requests) == 3


async def test_after_max_attempts_the_delivery_is_failed_and_left_alone(
    store: Store, receiver: WireServer
) -> None:
    receiver.default = Reply.json({"error": "no"}, status=500)
    dispatcher = dispatcher_on(store, max_attempts=3)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})

    done = await until_finished(dispatcher, delivery_id)

    assert (done.status, done.attempts, done.next_attempt_at) == ("failed", 3, None)
    assert "HTTP 500" in (done.last_error or "")
    assert len(receiver.requests) == 3
    await anyio.sleep(0.1)
    assert await dispatcher.deliver_due() == []
    assert len(receiver.requests) == 3


async def test_max_attempts_can_be_set_per_delivery(store: Store, receiver: WireServer) -> None:
    receiver.default = Reply.json({}, status=500)
    dispatcher = dispatcher_on(store, max_attempts=10)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "e", {}, max_attempts=1)
    done = await until_finished(dispatcher, delivery_id)
    assert (done.status, done.attempts, len(receiver.requests)) == ("failed", 1, 1)


async def test_410_gone_stops_at_once(store: Store, receiver: WireServer) -> None:
    receiver.push(Reply.json({}, status=410))
    dispatcher = dispatcher_on(store)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    done = await until_finished(dispatcher, delivery_id)
    assert (done.status, done.attempts, done.last_status_code) == ("failed", 1, 410)


async def test_retry_after_is_honoured(store: Store, receiver: WireServer) -> None:
    receiver.push(Reply.json({}, status=429, headers={"retry-after": "2"}))
    dispatcher = dispatcher_on(store)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    [after_429] = await dispatcher.deliver_due()
    assert after_429.next_attempt_at is not None and after_429.last_attempt_at is not None
    assert after_429.next_attempt_at - after_429.last_attempt_at >= 2.0
    assert await dispatcher.deliver_due() == []  # not due yet, although the backoff is 50 ms
    assert len(receiver.requests) == 1
    still = await dispatcher.get(delivery_id)
    assert still is not None and (still.status, still.last_status_code) == ("pending", 429)


def test_backoff_grows_exponentially_up_to_the_cap_with_bounded_jitter() -> None:
    plain = Backoff(base=5, factor=3, cap=3600, jitter=0)
    assert [plain.delay(n) for n in (1, 2, 3, 4)] == [5, 15, 45, 135]
    assert plain.delay(50) == 3600
    assert plain.delay(10_000) == 3600  # no overflow
    jittered = Backoff(base=100, factor=2, cap=1000, jitter=0.2)
    assert jittered.delay(1, rand=lambda: 0.0) == 80
    assert jittered.delay(1, rand=lambda: 1.0) == 120
    assert jittered.delay(10, rand=lambda: 1.0) == 1000  # jitter never passes the cap
    assert len({jittered.delay(2) for _ in range(20)}) > 1
    with pytest.raises(WebhookError, match="factor"):
        Backoff(factor=0.5)
    with pytest.raises(WebhookError, match="cap"):
        Backoff(base=10, cap=1)


async def test_a_receiver_that_hangs_times_out_and_is_retried(
    store: Store, receiver: WireServer
) -> None:
    receiver.push(Reply.json({}, hang_before=3.0), Reply.json({"ok": True}))
    dispatcher = dispatcher_on(store, timeout=0.3, claim_ttl=1.0)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    started = time.monotonic()
    [first] = await dispatcher.deliver_due()
    assert time.monotonic() - started < 2.0
    assert first.status == "pending"
    assert first.last_error == "timed out after 0.3 s"
    done = await until_finished(dispatcher, delivery_id)
    assert done.status == "delivered"
    assert {r.headers["webhook-id"] for r in receiver.requests} == {delivery_id}


async def test_a_closed_port_is_a_failed_attempt_not_a_crash(store: Store) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dispatcher = dispatcher_on(store)
    await dispatcher.enqueue(f"http://127.0.0.1:{port}/", SECRET, "job.finished", {})
    [first] = await dispatcher.deliver_due()
    assert first.status == "pending"
    assert (first.last_error or "").startswith("cannot connect")


# -- durability -------------------------------------------------------------------


async def test_a_new_dispatcher_on_the_same_store_file_delivers_what_was_pending(
    db_url: str, receiver: WireServer
) -> None:
    receiver.push(Reply.json({}, status=500))
    async with SQLStore(db_url) as first_store:
        first = dispatcher_on(first_store)
        delivery_id = await first.enqueue(receiver.url, SECRET, "job.finished", {"k": "v"})
        [failed_once] = await first.deliver_due()
        assert failed_once.status == "pending"
    # "Restart": a new store object and a new dispatcher, nothing shared but the file.
    async with SQLStore(db_url) as second_store:
        second = dispatcher_on(second_store)
        pending = await second.get(delivery_id)
        assert pending is not None and (pending.status, pending.attempts) == ("pending", 1)
        done = await until_finished(second, delivery_id)
    assert (done.status, done.attempts) == ("delivered", 2)
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery_id] * 2
    assert {a.holder for a in done.history} == {first.holder, second.holder}


async def test_an_attempt_whose_dispatcher_died_is_sent_again_after_its_claim_expires(
    db_url: str, receiver: WireServer
) -> None:
    receiver.push(Reply.json({}, hang_before=10.0), Reply.json({"ok": True}))
    async with SQLStore(db_url) as store_a, SQLStore(db_url) as store_b:
        dying = dispatcher_on(store_a, timeout=0.8, claim_ttl=3.0)
        survivor = dispatcher_on(store_b, timeout=0.8, claim_ttl=3.0)
        delivery_id = await dying.enqueue(receiver.url, SECRET, "job.finished", {})
        claimed = time.monotonic()
        async with anyio.create_task_group() as group:
            group.start_soon(dying.deliver_due)
            # The dispatcher "dies" mid-request: once the receiver has the request (on
            # a loaded machine the first send, which imports httpx, may take a while).
            with anyio.fail_after(10):
                while not receiver.requests:  # noqa: ASYNC110 - the receiver is a thread
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        assert len(receiver.requests) == 1

        # Its claim still holds: the survivor leaves the attempt alone for now...
        assert await survivor.deliver_due() == []
        assert len(receiver.requests) == 1
        # ...and sends it once the claim has expired.
        await anyio.sleep(max(0.0, claimed + 3.1 - time.monotonic()))
        [done] = await survivor.deliver_due()
    assert (done.status, done.attempts) == ("delivered", 1)
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery_id] * 2


async def test_two_dispatchers_on_one_store_send_each_delivery_once(
    db_url: str, receiver: WireServer
) -> None:
    receiver.default = Reply.json({"ok": True}, delay=0.02)
    async with SQLStore(db_url) as store_a, SQLStore(db_url) as store_b:
        one = dispatcher_on(store_a, concurrency=4)
        two = dispatcher_on(store_b, concurrency=4)
        ids = [await one.enqueue(receiver.url, SECRET, "job.finished", {"i": i}) for i in range(20)]
        results: dict[str, list[WebhookDelivery]] = {}

        async def pass_of(name: str, dispatcher: WebhookDispatcher) -> None:
            results[name] = await dispatcher.deliver_due()

        async with anyio.create_task_group() as group:
            group.start_soon(pass_of, "one", one)
            group.start_soon(pass_of, "two", two)
        statuses = {d.id: d.status for d in await one.deliveries()}

    sent = [r.headers["webhook-id"] for r in receiver.requests]
    assert sorted(sent) == sorted(ids)  # every delivery exactly once
    by_one = {d.id for d in results["one"]}
    by_two = {d.id for d in results["two"]}
    assert not by_one & by_two
    assert by_one | by_two == set(ids)
    assert statuses == dict.fromkeys(ids, "delivered")


async def test_a_pending_delivery_missing_from_the_index_is_found_by_sweep(
    store: Store, receiver: WireServer
) -> None:
    dispatcher = dispatcher_on(store)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    # A crash between the delivery's write and its index entry's write.
    assert await store.record_delete("webhook-due", delivery_id)
    assert await dispatcher.deliver_due() == []
    assert receiver.requests == []

    assert await dispatcher.sweep() == 1
    assert await dispatcher.sweep() == 0
    [done] = await dispatcher.deliver_due()
    assert done.status == "delivered"
    assert len(receiver.requests) == 1


async def test_a_stale_index_entry_is_repaired_not_sent_twice(
    store: Store, receiver: WireServer
) -> None:
    receiver.push(Reply.json({}, status=500))
    dispatcher = dispatcher_on(store, timeout=1.0, claim_ttl=1.2)
    delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    claimed = time.monotonic()
    await dispatcher.deliver_due()
    assert len(receiver.requests) == 1
    # A crash after the delivery recorded attempt 1 but before its index entry did.
    await store.record_put("webhook-due", delivery_id, {"next_attempt_at": 0, "attempts": 0})
    await anyio.sleep(max(0.0, claimed + 1.25 - time.monotonic()))  # attempt 0's claim expires

    assert await dispatcher.deliver_due() == []  # re-indexes from the delivery, sends nothing
    assert len(receiver.requests) == 1
    entry = await store.record_get("webhook-due", delivery_id)
    assert entry is not None and entry["attempts"] == 1
    done = await until_finished(dispatcher, delivery_id)
    assert (done.status, done.attempts, len(receiver.requests)) == ("delivered", 2, 2)


async def test_finished_deliveries_expire_after_retention_pending_ones_stay(
    store: Store, receiver: WireServer
) -> None:
    dispatcher = dispatcher_on(store, retention=0.5)
    delivered = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    await dispatcher.deliver_due()
    receiver.default = Reply.json({}, status=500)
    pending = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    await dispatcher.deliver_due()
    assert {d.id: d.status for d in await dispatcher.deliveries()} == {
        delivered: "delivered",
        pending: "pending",
    }
    await anyio.sleep(0.6)
    assert await dispatcher.get(delivered) is None
    still = await dispatcher.get(pending)
    assert still is not None and still.status == "pending"


async def test_the_in_memory_store_works_too(receiver: WireServer) -> None:
    async with InMemoryStore() as store:
        dispatcher = dispatcher_on(store)
        delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
        done = await until_finished(dispatcher, delivery_id)
    assert done.status == "delivered"


# -- the loop ----------------------------------------------------------------------------


async def test_run_delivers_as_soon_as_something_is_enqueued(
    store: Store, receiver: WireServer
) -> None:
    dispatcher = dispatcher_on(store, poll_interval=30.0)
    async with anyio.create_task_group() as group:
        await group.start(dispatcher.run)
        started = time.monotonic()
        delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
        await arrival(receiver)
        assert time.monotonic() - started < 5  # woken, not waiting for the 30 s poll
        with anyio.fail_after(5):
            while True:
                found = await dispatcher.get(delivery_id)
                if found is not None and found.status == "delivered":
                    break
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert receiver.requests[0].headers["webhook-id"] == delivery_id


async def test_run_picks_up_deliveries_another_replica_enqueued(
    db_url: str, receiver: WireServer
) -> None:
    async with SQLStore(db_url) as store_a, SQLStore(db_url) as store_b:
        runner = dispatcher_on(store_a, poll_interval=0.05)
        other = dispatcher_on(store_b)
        async with anyio.create_task_group() as group:
            await group.start(runner.run)
            delivery_id = await other.enqueue(receiver.url, SECRET, "job.finished", {})
            await arrival(receiver)
            group.cancel_scope.cancel()
    assert receiver.requests[0].headers["webhook-id"] == delivery_id


# -- reading -------------------------------------------------------------------------------


async def test_deliveries_filter_by_status_and_metadata(store: Store, receiver: WireServer) -> None:
    dispatcher = dispatcher_on(store)
    a = await dispatcher.enqueue(
        receiver.url, SECRET, "job.finished", {}, metadata={"job_id": "a", "owner": "p1"}
    )
    b = await dispatcher.enqueue(
        receiver.url, SECRET, "job.finished", {}, metadata={"job_id": "b", "owner": "p1"}
    )
    await dispatcher.deliver_due()
    c = await dispatcher.enqueue(receiver.url, SECRET, "job.started", {}, metadata={"owner": "p2"})
    assert [d.id for d in await dispatcher.deliveries()] == [a, b, c]
    assert [d.id for d in await dispatcher.deliveries(status="pending")] == [c]
    assert [d.id for d in await dispatcher.deliveries(metadata={"owner": "p1"})] == [a, b]
    assert [d.id for d in await dispatcher.deliveries(metadata={"job_id": "b"})] == [b]
    assert await dispatcher.get("msg_unknown") is None
    with pytest.raises(WebhookError, match="status must be one of"):
        await dispatcher.deliveries(status="sent")  # type: ignore[arg-type]


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (("not-a-secret", "job.finished", {}), "whsec_"),
        (([], "job.finished", {}), "at least one"),
        ((SECRET, "", {}), "event type"),
        ((SECRET, "job finished", {}), "event type"),
        ((SECRET, "job.finished", [1, 2]), "JSON object"),
        ((SECRET, "job.finished", {"x": float("nan")}), "must be JSON"),
        ((SECRET, "job.finished", {"x": {1, 2}}), "must be JSON"),
        ((SECRET, "job.finished", {"x": "y" * 300_000}), "send a reference"),
    ],
)
async def test_bad_input_to_enqueue_is_refused_and_stores_nothing(
    store: Store, receiver: WireServer, args: tuple[Any, ...], complaint: str
) -> None:
    dispatcher = dispatcher_on(store)
    with pytest.raises(WebhookError, match=complaint):
        await dispatcher.enqueue(receiver.url, *args)
    assert await store.record_list("webhook") == []
    assert await store.record_list("webhook-due") == []
    # Control: good input is stored.
    await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {"x": 1})
    assert len(await store.record_list("webhook")) == 1


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": 10, "claim_ttl": 5}, "claim_ttl"),
        ({"retention": -1}, "retention"),
        ({"allow": "127.0.0.0/8"}, "list of entries"),
        ({"allow": ["10.0.0.1/8"]}, "not a CIDR network"),
        ({"allow": ["bad host!"]}, "not a host name"),
    ],
)
async def test_bad_dispatcher_settings_are_refused(
    store: Store, options: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(WebhookError, match=complaint):
        WebhookDispatcher(store, **options)
    assert WebhookDispatcher(store, allow=["10.0.0.0/8", "hooks.corp", "*.corp", "[::1]"])


# -- secrets stay secret ------------------------------------------------------------------


async def test_secrets_and_url_paths_never_reach_logs_or_readers(
    store: Store, receiver: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="koboi_server.webhooks")
    receiver.push(Reply.json({}, status=500))
    dispatcher = dispatcher_on(store)
    url = f"{receiver.url}/hooks/T0KEN-in-path?token=s3cr3t"
    delivery_id = await dispatcher.enqueue(url, SECRET, "job.finished", {})
    done = await until_finished(dispatcher, delivery_id)
    assert done.status == "delivered"
    assert caplog.records  # the control: it did log
    for leak in (SECRET, SECRET[6:], "T0KEN", "s3cr3t"):
        assert leak not in caplog.text
    assert SECRET not in repr(done)
    assert SECRET not in json.dumps([a.to_json() for a in done.history])


# -- settings -----------------------------------------------------------------------------


async def test_settings_build_a_dispatcher_and_pick_endpoints(
    store: Store, receiver: WireServer
) -> None:
    settings = WebhookSettings.model_validate(
        {
            "allow": LOOPBACK,
            "max_attempts": 4,
            "backoff_base": 0.05,
            "retention_days": None,
            "endpoints": [
                {"url": receiver.url, "secrets": [SECRET], "events": ["job.*"]},
                {"url": receiver.url + "/audit", "secrets": [SECRET]},
                {"url": receiver.url + "/approvals", "secrets": [SECRET], "events": ["approval"]},
            ],
        }
    )
    dispatcher = settings.dispatcher(store)
    assert (dispatcher.max_attempts, dispatcher.retention) == (4, None)
    wanted = settings.endpoints_for("job.finished")
    assert [e.url for e in wanted] == [receiver.url, receiver.url + "/audit"]
    for endpoint in wanted:
        await dispatcher.enqueue(endpoint.url, endpoint.secret_values(), "job.finished", {})
    await dispatcher.deliver_due()
    assert sorted(r.path for r in receiver.requests) == ["/", "/audit"]
    assert SECRET not in repr(settings)


# -- replicas on PostgreSQL -------------------------------------------------------------

# pg_store_url (conftest): a schema of the test's own on the test server.


@pytest.mark.postgres
async def test_two_replicas_on_postgres_send_each_delivery_once_and_survive_a_restart(
    pg_store_url: str, receiver: WireServer
) -> None:
    receiver.default = Reply.json({"ok": True}, delay=0.02)
    async with SQLStore(pg_store_url) as first_store:
        one = dispatcher_on(first_store, concurrency=4)
        ids = [await one.enqueue(receiver.url, SECRET, "job.finished", {"i": i}) for i in range(30)]
    # Both replicas start afresh on the shared database.
    async with SQLStore(pg_store_url) as store_a, SQLStore(pg_store_url) as store_b:
        replicas = [dispatcher_on(store_a, concurrency=4), dispatcher_on(store_b, concurrency=4)]
        attempted: list[list[WebhookDelivery]] = [[], []]

        async def pass_of(index: int) -> None:
            attempted[index] = await replicas[index].deliver_due()

        async with anyio.create_task_group() as group:
            group.start_soon(pass_of, 0)
            group.start_soon(pass_of, 1)
        statuses = {d.id: d.status for d in await replicas[1].deliveries()}
    assert sorted(r.headers["webhook-id"] for r in receiver.requests) == sorted(ids)
    assert not {d.id for d in attempted[0]} & {d.id for d in attempted[1]}
    assert statuses == dict.fromkeys(ids, "delivered")


async def test_a_malformed_stored_delivery_does_not_stop_the_others(
    store: Store, receiver: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    dispatcher = dispatcher_on(store, claim_ttl=6.0)
    good = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
    # Hand-edited or written by a future version: no URL, no body.
    broken = "msg_00000000000000000000000000"
    await store.record_put(
        "webhook", broken, {"id": broken, "status": "pending", "attempts": 0, "next_attempt_at": 0}
    )
    await store.record_put("webhook-due", broken, {"next_attempt_at": 0, "attempts": 0})

    attempted = await dispatcher.deliver_due()

    assert [d.id for d in attempted] == [good]
    assert [r.headers["webhook-id"] for r in receiver.requests] == [good]
    assert f"webhook {broken}: attempt failed unexpectedly" in caplog.text
    assert [d.id for d in await dispatcher.deliveries()] == [good]  # the broken one is skipped
    with pytest.raises(WebhookError, match="is malformed"):
        await dispatcher.get(broken)
    assert await store.record_get("webhook", broken) is not None  # and kept, not deleted


class IndexFailingStore(InMemoryStore):
    """An in-memory store whose next write of a due-index entry fails, as a store blip would."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_index_writes = 1

    async def record_put(
        self, kind: str, key: str, data: Any, *, expires_at: float | None = None
    ) -> None:
        if kind == "webhook-due" and self.fail_index_writes:
            self.fail_index_writes -= 1
            raise StoreError("database is locked (injected)")
        await super().record_put(kind, key, data, expires_at=expires_at)


async def test_a_delivery_stored_but_not_indexed_is_still_returned_and_sent(
    receiver: WireServer,
) -> None:
    store = IndexFailingStore()
    async with store:
        dispatcher = dispatcher_on(store, poll_interval=30.0)
        async with anyio.create_task_group() as group:
            await group.start(dispatcher.run)
            # enqueue succeeds: the delivery is stored; only its index entry failed...
            delivery_id = await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
            assert store.fail_index_writes == 0
            # ...and the loop sweeps at once instead of in five minutes.
            await arrival(receiver)
            group.cancel_scope.cancel()
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery_id]


async def test_deliveries_go_through_the_hosts_request_hooks_as_webhook_peers(
    store: Store, receiver: WireServer
) -> None:
    import koboi_http.plugin
    from koboi import hookimpl
    from koboi.plugins import PluginHost
    from koboi_http.hooks import OutboundRequest, RequestHook

    seen: list[tuple[str, str, int]] = []

    class Tagger(RequestHook):
        def on_request(self, request: OutboundRequest) -> None:
            request.headers["x-tenant"] = "acme"

        def on_response(self, request: OutboundRequest, response: Any, seconds: float) -> None:
            seen.append((request.peer, request.host, response.status_code))

    class Hooks:
        @hookimpl
        def koboi_http_register_request_hooks(self, register: Any) -> None:
            register("tagger", Tagger())

    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_http.plugin, "http", dist="koboi-http")
    host.add_plugin(Hooks(), "hooks")
    dispatcher = dispatcher_on(store, host=host)
    await dispatcher.enqueue(f"{receiver.url}/hooks", SECRET, "job.finished", {"ok": 1})
    await dispatcher.deliver_due()
    [request] = receiver.requests
    assert request.headers["x-tenant"] == "acme"
    assert seen == [("webhook", "127.0.0.1", 200)]
    # The hook may add headers, never change what was signed.
    assert verify(SECRET, request.headers, request.body)["data"] == {"ok": 1}
