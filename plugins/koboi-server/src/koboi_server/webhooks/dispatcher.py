"""``WebhookDispatcher``: the durable outbox of webhook deliveries and the loop that sends them.

Deliveries live in the store (keyed records), never only in memory: they
survive a restart, and every replica on one PostgreSQL database sees and
sends them. Two record kinds are used:

- ``webhook`` / ``<delivery id>``: the delivery (URL, secrets, body, status,
  attempts, history). Finished ones expire after ``retention``;
- ``webhook-due`` / ``<delivery id>``: a small index entry per *pending*
  delivery (``next_attempt_at``, ``attempts``), so a pass reads only what may
  be due, not the whole history.

Each attempt is **claimed** before it is sent, with the store's atomic counter
(``counter_add("webhook-claim:<id>:<attempt>", 1)`` returns 1 to exactly one
caller until the claim expires). The claimant re-reads the delivery to confirm
the attempt is still the one due, then sends. The send is bounded by
``timeout``, well inside the claim's ``claim_ttl``, so while the claimant lives
no other dispatcher sends the same attempt.

The guarantee is **at least once**, not exactly once: a dispatcher that dies
after the receiver answered but before the result was written (or whose store
write fails) leaves the attempt pending; it is sent again after the claim
expires, with the same ``webhook-id``. Receivers deduplicate on that id.
Claims compare times taken from each replica's clock: keep clocks in sync (NTP).
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import re
import secrets as secrets_module
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

if TYPE_CHECKING:
    import httpx

    from koboi.plugins import PluginHost

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi.store import RecordWrite, Store, records_of
from koboi_http.guard import Resolver
from koboi_http.hooks import WEBHOOK
from koboi_http.pinning import PinnedTarget, pinned_client, send_pinned
from koboi_server.outages import LoopErrors, StoreOutage, is_store_failure
from koboi_server.webhooks.delivery import (
    DUE_KIND,
    HISTORY_LIMIT,
    RECORD_KIND,
    RECORD_VERSION,
    STATUSES,
    Attempt,
    Backoff,
    DeliveryStatus,
    WebhookDelivery,
)
from koboi_server.webhooks.errors import WebhookError, WebhookURLRefused
from koboi_server.webhooks.signing import Secrets, new_message_id, secret_key, webhook_headers
from koboi_server.webhooks.url_guard import WebhookURLPolicy, redacted_url, shown_url

__all__ = ["WebhookDispatcher"]

log = get_logger("koboi_server.webhooks")

CLAIM_PREFIX = "webhook-claim:"
_EVENT_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_ERROR_EXCERPT = 300
# A 410 says the endpoint is gone for good (Standard Webhooks): no more attempts.
_GONE = 410
# A receiver's Retry-After is honoured up to this many seconds (a longer one is
# more likely a mistake than a plan, and would park the delivery for days).
_RETRY_AFTER_CAP = 3600.0


@dataclass(frozen=True)
class _Outcome:
    status_code: int | None
    error: str | None
    retry_after: float | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookDispatcher:
    """Stores webhook deliveries in ``store`` and sends them, signed, until they succeed.

    :param store: an open koboi store (SQLite for one node, PostgreSQL shared by replicas).
    :param allow: allow-list for receivers that are not on public addresses: CIDR
        networks (``"10.20.0.0/16"``), addresses, host names (``"hooks.corp"``) and
        suffixes (``"*.corp"``). Cloud metadata addresses are refused regardless.
    :param max_attempts: attempts before a delivery is ``failed`` (default for ``enqueue``).
    :param backoff: the wait between attempts (:class:`Backoff`).
    :param timeout: seconds one attempt may take in all (connect, send, response head).
    :param connect_timeout: seconds to establish a connection.
    :param retention: seconds a delivered or failed delivery is kept (None: forever).
    :param poll_interval: seconds :meth:`run` waits between passes when nothing wakes it.
    :param concurrency: attempts one dispatcher sends at once.
    :param batch_size: most deliveries one pass takes on.
    :param claim_ttl: seconds a claim on an attempt holds; must exceed ``timeout``
        (default ``timeout + 30``). A dispatcher that dies mid-attempt delays that
        delivery by at most this long.
    :param max_body_bytes: largest body ``enqueue`` accepts.
    :param resolver: host name resolver (tests); the system's by default.
    :param verify: TLS verification: True (system CAs via httpx), False, or an ``SSLContext``.
    :param holder: this dispatcher's name in claims and attempt history
        (default ``host:pid:random``).
    :param host: the plugin host whose ``koboi_http`` request hooks see each delivery
        (peer ``"webhook"``); default: the kernel's default host.
    """

    def __init__(
        self,
        store: Store,
        *,
        allow: Iterable[str] = (),
        max_attempts: int = 15,
        backoff: Backoff | None = None,
        timeout: float = 15.0,
        connect_timeout: float = 5.0,
        retention: float | None = 7 * 24 * 3600.0,
        poll_interval: float = 1.0,
        concurrency: int = 8,
        batch_size: int = 100,
        claim_ttl: float | None = None,
        max_body_bytes: int = 256 * 1024,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        user_agent: str = "koboi-webhooks/0.1",
        holder: str | None = None,
        host: PluginHost | None = None,
    ) -> None:
        _check_positive_int("max_attempts", max_attempts)
        _check_positive_int("concurrency", concurrency)
        _check_positive_int("batch_size", batch_size)
        _check_positive_int("max_body_bytes", max_body_bytes)
        for name, value in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("poll_interval", poll_interval),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise WebhookError(f"webhook {name} must be a positive number of seconds")
        if retention is not None and not retention > 0:
            raise WebhookError("webhook retention must be a positive number of seconds, or None")
        ttl = timeout + 30.0 if claim_ttl is None else claim_ttl
        if not ttl > timeout:
            raise WebhookError(
                f"webhook claim_ttl ({ttl} s) must exceed the attempt timeout ({timeout} s), "
                "or another replica could send the same attempt while this one still waits"
            )
        self.store = store
        #: Whose ``koboi_http`` request hooks run for each delivery (peer "webhook").
        self.host = host
        self.records = records_of(store, "webhooks (their durable outbox)")
        #: Where a failing store is said (once per outage); the server shares one
        #: between its background loops.
        self.outage = StoreOutage()
        self.policy = WebhookURLPolicy(allow, resolver=resolver)
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.timeout = float(timeout)
        self.connect_timeout = float(min(connect_timeout, timeout))
        self.retention = retention
        self.poll_interval = float(poll_interval)
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.claim_ttl = float(ttl)
        self.max_body_bytes = max_body_bytes
        self.user_agent = user_agent
        self.holder = holder or (
            f"{socket.gethostname()}:{os.getpid()}:{secrets_module.token_hex(4)}"
        )
        # One TLS context for every attempt: building one loads the CA bundle.
        self._verify: ssl.SSLContext | bool = verify
        self._wake: anyio.Event | None = None
        self._sweep_soon = False

    # -- registration --------------------------------------------------------------

    async def check_url(self, url: str) -> str:
        """Check ``url`` as ``enqueue`` would; return it normalised, or raise WebhookURLRefused.

        Call it when a webhook is configured (a job is created) to refuse a bad URL
        with a 4xx at once rather than at the first delivery.
        """
        pinned = await self.policy.pin(url)
        return str(pinned.url)

    async def enqueue(
        self,
        url: str,
        secret: Secrets,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        metadata: Mapping[str, Any] | None = None,
        max_attempts: int | None = None,
    ) -> str:
        """Store a delivery of ``payload`` to ``url`` and return its id (``msg_...``).

        The URL is checked now (and again before every attempt); ``secret`` is a
        ``whsec_`` secret or several (each attempt then carries one signature per
        secret, for rotation). The body sent is
        ``{"type": event_type, "timestamp": <ISO 8601>, "data": payload}``, fixed
        now, identical on every attempt. ``metadata`` (JSON) is kept with the
        delivery for the caller's own lookups (job id, principal...).

        Raises :class:`WebhookURLRefused` or :class:`WebhookError` (nothing is
        stored then), or the store's error.
        """
        delivery_id, (delivery, due) = await self.prepare(
            url, secret, event_type, payload, metadata=metadata, max_attempts=max_attempts
        )
        # The delivery first, then its index entry: a crash in between leaves a
        # pending delivery that sweep() indexes again, never an entry with no delivery.
        await self.records.record_put(delivery[0], delivery[1], delivery[2])
        try:
            await self.records.record_put(due[0], due[1], due[2])
        except KoboiError as exc:
            # The delivery is stored, so it is not lost: the next sweep indexes it.
            # Raising here would make the caller enqueue it again under a new id.
            log.warning("webhook %s stored but not indexed (a sweep will): %s", delivery_id, exc)
            self._sweep_soon = True
        self.wake()
        return delivery_id

    async def prepare(
        self,
        url: str,
        secret: Secrets,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        metadata: Mapping[str, Any] | None = None,
        max_attempts: int | None = None,
    ) -> tuple[str, tuple[RecordWrite, RecordWrite]]:
        """What :meth:`enqueue` would store, without storing it: the delivery id and
        its two records (the delivery and its due-index entry).

        For a caller that writes them in its own transaction, so the delivery exists
        exactly when the change it reports does (``Store.update_job(records=...)``).
        Call :meth:`wake` once they are written. Raises as :meth:`enqueue` does.
        """
        secret_list = _as_secret_list(secret)
        if not secret_list:
            raise WebhookError("give at least one webhook secret")
        for each in secret_list:
            secret_key(each)
        if not isinstance(event_type, str) or not _EVENT_TYPE.fullmatch(event_type):
            raise WebhookError(
                f"webhook event type {event_type!r} must be 1 to 128 letters, digits or "
                "'._:-', starting with a letter or digit (e.g. 'job.finished')"
            )
        if not isinstance(payload, Mapping):
            raise WebhookError(
                f"a webhook payload must be a JSON object (a mapping), not {type(payload).__name__}"
            )
        attempts_cap = self.max_attempts if max_attempts is None else max_attempts
        _check_positive_int("max_attempts", attempts_cap)
        now = time.time()
        try:
            body = json.dumps(
                {"type": event_type, "timestamp": _iso(now), "data": dict(payload)},
                ensure_ascii=False,
                allow_nan=False,
                separators=(",", ":"),
            )
            meta = json.loads(json.dumps(dict(metadata or {}), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise WebhookError(f"webhook payload and metadata must be JSON: {exc}") from None
        size = len(body.encode("utf-8"))
        if size > self.max_body_bytes:
            raise WebhookError(
                f"the webhook body would be {size} bytes, more than the limit of "
                f"{self.max_body_bytes}; send a reference (an id or URL) instead of the data"
            )
        checked = await self.check_url(url)
        delivery_id = new_message_id()
        record: dict[str, Any] = {
            "version": RECORD_VERSION,
            "id": delivery_id,
            "url": checked,
            "secrets": secret_list,
            "event_type": event_type,
            "body": body,
            "status": "pending",
            "attempts": 0,
            "max_attempts": attempts_cap,
            "created_at": now,
            "next_attempt_at": now,
            "last_attempt_at": None,
            "delivered_at": None,
            "last_status_code": None,
            "last_error": None,
            "metadata": meta,
            "history": [],
        }
        log.debug("webhook %s prepared for %s (%s)", delivery_id, redacted_url(checked), event_type)
        due = {"next_attempt_at": now, "attempts": 0}
        return delivery_id, ((RECORD_KIND, delivery_id, record), (DUE_KIND, delivery_id, due))

    # -- reading ---------------------------------------------------------------------

    async def get(self, delivery_id: str) -> WebhookDelivery | None:
        """The delivery with this id, or None (unknown, or expired after retention)."""
        record = await self.records.record_get(RECORD_KIND, delivery_id)
        if record is None:
            return None
        try:
            return WebhookDelivery.from_record(record)
        except (KeyError, TypeError, ValueError):
            raise WebhookError(
                f"the stored webhook delivery {delivery_id!r} is malformed (edited by hand, "
                "or written by another version); delete it or fix its record"
            ) from None

    async def deliveries(
        self,
        *,
        status: DeliveryStatus | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[WebhookDelivery]:
        """Stored deliveries, oldest first, filtered by status and by metadata values."""
        if status is not None and status not in STATUSES:
            raise WebhookError(f"webhook status must be one of {', '.join(STATUSES)}")
        wanted = dict(metadata or {})
        found: list[WebhookDelivery] = []
        for key, record in await self.records.record_list(RECORD_KIND):
            if status is not None and record.get("status") != status:
                continue
            meta = record.get("metadata") or {}
            if any(meta.get(k) != v for k, v in wanted.items()):
                continue
            try:
                found.append(WebhookDelivery.from_record(record))
            except (KeyError, TypeError, ValueError):
                log.error("webhook %s: the stored delivery is malformed; skipped", key)
        return found

    # -- sending -----------------------------------------------------------------------

    def wake(self) -> None:
        """Make a running :meth:`run` start its next pass now (after an enqueue)."""
        if self._wake is not None:
            self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send due deliveries until cancelled: a pass, then wait ``poll_interval`` or a wake.

        Start it in a task group (``await tg.start(dispatcher.run)``) for the life of
        the server. Store errors are logged and the loop goes on; each replica runs
        its own loop on the shared store. It re-indexes orphaned deliveries
        (:meth:`sweep`) on start and every 5 minutes.
        """
        self._wake = anyio.Event()
        task_status.started()
        next_sweep = 0.0
        passes = LoopErrors("webhook deliveries", self.outage)
        while True:
            if self._sweep_soon or time.monotonic() >= next_sweep:
                self._sweep_soon = False
                try:
                    await self.sweep()
                except Exception as exc:  # a failed sweep is retried; it must not end the loop
                    if is_store_failure(exc):
                        self.outage.failed("webhook sweep", exc)
                    else:
                        log.warning("webhook sweep failed (will retry): %s", exc)
                else:
                    self.outage.answered("webhook sweep")
                next_sweep = time.monotonic() + 300.0
            busy = False
            try:
                busy = len(await self.deliver_due()) >= self.batch_size
            except Exception as exc:
                # A bug must not stop deliveries for the life of the server: logged (a store
                # failure once per outage, a bug with its traceback once while it repeats).
                passes.failed(exc)
            else:
                passes.ok()
            if busy:
                continue
            with anyio.move_on_after(self.poll_interval):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def deliver_due(self) -> list[WebhookDelivery]:
        """One pass: claim and send every due delivery; return those attempted, as they now are.

        Attempts are sent ``concurrency`` at a time. A delivery another dispatcher
        holds a claim on is left to it.
        """
        now = time.time()
        due: list[tuple[float, str, int]] = []
        for key, entry in await self.records.record_list(DUE_KIND):
            try:
                at, attempts = float(entry["next_attempt_at"]), int(entry["attempts"])
            except (KeyError, TypeError, ValueError):
                log.error("webhook index entry %s is malformed; re-indexing it", key)
                await self._reindex(key)
                continue
            if at <= now:
                due.append((at, key, attempts))
        due.sort()
        results: list[WebhookDelivery] = []
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def one(delivery_id: str, attempts: int) -> None:
            async with limiter:
                try:
                    done = await self._attempt(delivery_id, attempts)
                except (KoboiError, OSError) as exc:
                    log.warning("webhook %s: attempt not completed: %s", delivery_id, exc)
                    return
                except Exception:
                    # One unreadable delivery must not stop the others. It stays
                    # pending and is tried again once its claim expires.
                    log.exception("webhook %s: attempt failed unexpectedly", delivery_id)
                    return
                if done is not None:
                    results.append(done)

        async with anyio.create_task_group() as group:
            for _at, delivery_id, attempts in due[: self.batch_size]:
                group.start_soon(one, delivery_id, attempts)
        results.sort(key=lambda d: d.id)
        return results

    async def sweep(self) -> int:
        """Index pending deliveries that have no due entry (a crash between two writes).

        Returns how many were re-indexed. Cheap enough to run now and then: it
        reads every stored delivery once.
        """
        indexed = {key for key, _ in await self.records.record_list(DUE_KIND)}
        repaired = 0
        for key, record in await self.records.record_list(RECORD_KIND):
            if record.get("status") != "pending" or key in indexed:
                continue
            try:
                due_at, attempts = (
                    float(record.get("next_attempt_at") or 0),
                    int(record["attempts"]),
                )
            except (KeyError, TypeError, ValueError):
                log.error("webhook %s: the stored delivery is malformed; not indexed", key)
                continue
            await self._put_due(key, due_at, attempts)
            repaired += 1
        if repaired:
            log.info("webhook sweep re-indexed %d pending deliveries", repaired)
        return repaired

    # -- one attempt -----------------------------------------------------------------

    async def _attempt(self, delivery_id: str, attempts: int) -> WebhookDelivery | None:
        claimed_at = time.time()
        claim = await self.records.counter_add(
            f"{CLAIM_PREFIX}{delivery_id}:{attempts}", 1, expires_at=claimed_at + self.claim_ttl
        )
        if claim != 1:
            return None  # another dispatcher holds this attempt
        record = await self.records.record_get(RECORD_KIND, delivery_id)
        if record is None:
            await self.records.record_delete(DUE_KIND, delivery_id)
            return None
        if record.get("status") != "pending":
            await self.records.record_delete(DUE_KIND, delivery_id)
            return None
        if int(record["attempts"]) != attempts:
            # Our index entry is stale (a crash between the two writes of an attempt).
            await self._put_due(
                delivery_id, float(record["next_attempt_at"]), int(record["attempts"])
            )
            return None
        if float(record["next_attempt_at"]) > time.time():
            await self._put_due(delivery_id, float(record["next_attempt_at"]), attempts)
            return None
        started = time.time()
        outcome = await self._send(record)
        finished = time.time()
        if finished - claimed_at >= self.claim_ttl:
            log.warning(
                "webhook %s: attempt %d outlasted its claim (%.1f s); another replica may "
                "have sent it too",
                delivery_id,
                attempts + 1,
                finished - claimed_at,
            )
        # The result is written even if we are being cancelled now: the receiver
        # has answered, and forgetting that would only cause a needless resend.
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.claim_ttl):
            return await self._record_outcome(record, outcome, started, finished)
        return None

    async def _record_outcome(
        self, record: dict[str, Any], outcome: _Outcome, started: float, finished: float
    ) -> WebhookDelivery:
        delivery_id = str(record["id"])
        number = int(record["attempts"]) + 1
        attempt = Attempt(
            number=number,
            at=started,
            holder=self.holder,
            duration=finished - started,
            status_code=outcome.status_code,
            error=outcome.error,
        )
        history = [*record.get("history", []), attempt.to_json()][-HISTORY_LIMIT:]
        record.update(
            attempts=number,
            last_attempt_at=started,
            last_status_code=outcome.status_code,
            last_error=outcome.error,
            history=history,
        )
        status: DeliveryStatus
        if outcome.delivered:
            status = "delivered"
            record.update(status=status, delivered_at=finished, next_attempt_at=None)
        elif outcome.status_code == _GONE or number >= int(record["max_attempts"]):
            status = "failed"
            record.update(status=status, next_attempt_at=None)
        else:
            status = "pending"
            wait = self.backoff.delay(number)
            if outcome.retry_after is not None:
                wait = max(wait, min(outcome.retry_after, _RETRY_AFTER_CAP))
            record.update(status=status, next_attempt_at=finished + wait)
        if status == "pending":
            await self.records.record_put(RECORD_KIND, delivery_id, record)
            await self._put_due(delivery_id, float(record["next_attempt_at"]), number)
        else:
            expires = None if self.retention is None else finished + self.retention
            await self.records.record_put(RECORD_KIND, delivery_id, record, expires_at=expires)
            await self.records.record_delete(DUE_KIND, delivery_id)
        shown = redacted_url(str(record["url"]))
        if status == "delivered":
            log.info("webhook %s delivered to %s (attempt %d)", delivery_id, shown, number)
        elif status == "failed":
            log.warning(
                "webhook %s to %s failed after %d attempts: %s",
                delivery_id,
                shown,
                number,
                outcome.error,
            )
        else:
            log.info(
                "webhook %s to %s: attempt %d failed (%s); next in %.0f s",
                delivery_id,
                shown,
                number,
                outcome.error,
                float(record["next_attempt_at"]) - finished,
            )
        return WebhookDelivery.from_record(record)

    async def _send(self, record: Mapping[str, Any]) -> _Outcome:
        """POST the delivery once, to a freshly checked address; never raises for the network."""
        import httpx

        url = str(record["url"])
        try:
            with anyio.fail_after(self.timeout):
                pinned = await self.policy.pin(url)
                return await self._post(pinned, record)
        except WebhookURLRefused as exc:
            return _Outcome(None, f"not sent: {exc}")
        except TimeoutError:
            return _Outcome(None, f"timed out after {self.timeout:g} s")
        except httpx.HTTPError as exc:
            return _Outcome(None, f"{type(exc).__name__}: {_error_text(exc)}")
        except OSError as exc:
            return _Outcome(None, f"{type(exc).__name__}: {exc.strerror or exc}")

    async def _post(self, pinned: PinnedTarget, record: Mapping[str, Any]) -> _Outcome:
        import httpx

        if self._verify is True:
            self._verify = httpx.create_ssl_context()
        body = str(record["body"]).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": self.user_agent,
            **webhook_headers(list(record["secrets"]), str(record["id"]), int(time.time()), body),
        }
        # One client per attempt: a pooled TLS connection verified for one name must
        # never carry another name's request to the same address.
        async with pinned_client(
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            verify=self._verify,
            peer=WEBHOOK,
            host=self.host,
        ) as client:
            try:
                response, _ = await send_pinned(
                    client, "POST", pinned, headers=headers, content=body
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                return _Outcome(None, f"cannot connect: {_error_text(exc)}")
            try:
                return await _outcome_of(response)
            finally:
                await response.aclose()

    # -- the due index -----------------------------------------------------------------

    async def _put_due(self, delivery_id: str, next_attempt_at: float, attempts: int) -> None:
        await self.records.record_put(
            DUE_KIND, delivery_id, {"next_attempt_at": next_attempt_at, "attempts": attempts}
        )

    async def _reindex(self, delivery_id: str) -> None:
        record = await self.records.record_get(RECORD_KIND, delivery_id)
        if record is None or record.get("status") != "pending":
            await self.records.record_delete(DUE_KIND, delivery_id)
        else:
            await self._put_due(
                delivery_id, float(record["next_attempt_at"]), int(record["attempts"])
            )


async def _outcome_of(response: httpx.Response) -> _Outcome:
    code = response.status_code
    if 200 <= code < 300:
        return _Outcome(code, None)
    if 300 <= code < 400:
        location = response.headers.get("location", "")
        where = f" to {shown_url(location)}" if location else ""
        return _Outcome(
            code,
            f"HTTP {code}: the receiver redirected{where}; redirects are not followed, "
            "register the final URL",
        )
    excerpt = await _read_excerpt(response)
    detail = f"HTTP {code} {response.reason_phrase}".rstrip()
    if excerpt:
        detail += f": {excerpt}"
    return _Outcome(code, detail, _retry_after(response.headers.get("retry-after")))


async def _read_excerpt(response: httpx.Response) -> str:
    """The start of an error response's body, for ``last_error`` (never all of it)."""
    import httpx

    data = bytearray()
    try:
        async for chunk in response.aiter_raw():
            data += chunk
            if len(data) >= _ERROR_EXCERPT:
                break
    except httpx.HTTPError:
        pass
    text = bytes(data[:_ERROR_EXCERPT]).decode("utf-8", errors="replace")
    return " ".join(text.split())


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), or None."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WebhookError(f"webhook {name} must be a whole number >= 1, not {value!r}")


def _as_secret_list(secret: Secrets) -> list[str]:
    return [secret] if isinstance(secret, str) else list(secret)
