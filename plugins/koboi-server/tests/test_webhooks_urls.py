"""Webhook URL safety: refused at registration, checked again at delivery, pinned, no redirects.

"Nothing was sent" is proven by the receivers' own counters (``connections``,
``requests``); each refusal has a control in which the same URL, allowed by
the allow-list, does reach the receiver. Non-loopback addresses are only ever
refused here (before any connection); no test sends traffic off this machine.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.store import InMemoryStore, Store
from koboi_server.webhooks import (
    Backoff,
    WebhookDispatcher,
    WebhookEndpoint,
    WebhookURLRefused,
    generate_secret,
    verify,
)
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

SECRET = generate_secret()
FAST = Backoff(base=0.01, factor=1.0, cap=0.01, jitter=0.0)


@pytest.fixture
async def store() -> Any:
    async with InMemoryStore() as opened:
        yield opened


@pytest.fixture
def receiver() -> Iterator[WireServer]:
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        yield server


class FakeDNS:
    """A resolver with scripted answers; a name it does not know does not resolve."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = dict(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise OSError(-2, "Name or service not known")
        return self.answers[host]


def dispatcher_on(store: Store, **options: Any) -> WebhookDispatcher:
    options.setdefault("backoff", FAST)
    options.setdefault("timeout", 5.0)
    return WebhookDispatcher(store, **options)


# -- loopback in every notation --------------------------------------------------------

LOOPBACK_SPELLINGS = [
    "http://127.0.0.1:{port}/hook",
    "http://127.1:{port}/hook",
    "http://0x7f000001:{port}/hook",
    "http://2130706433:{port}/hook",
    "http://[::ffff:127.0.0.1]:{port}/hook",
    "http://localhost:{port}/hook",
    "http://LOCALHOST.:{port}/hook",
]


@pytest.mark.parametrize("template", LOOPBACK_SPELLINGS)
async def test_loopback_in_any_notation_is_refused_at_registration(
    template: str, store: Store, receiver: WireServer
) -> None:
    url = template.format(port=receiver.port)
    with pytest.raises(WebhookURLRefused, match="loopback") as caught:
        await dispatcher_on(store).enqueue(url, SECRET, "job.finished", {})
    assert "public addresses only" in str(caught.value)
    assert await store.record_list("webhook") == []
    assert receiver.connections == 0

    # Control: the same URL, allow-listed, is stored and reaches the receiver.
    allowed = dispatcher_on(store, allow=["127.0.0.0/8", "::1/128"])
    delivery_id = await allowed.enqueue(url, SECRET, "job.finished", {})
    [done] = await allowed.deliver_due()
    assert done.status == "delivered", done.last_error
    [request] = receiver.requests
    assert request.headers["webhook-id"] == delivery_id
    assert verify(SECRET, request.headers, request.body)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1]/", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4:8080/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://2852039166/", "metadata"),  # 169.254.169.254 as one number
        ("http://169.254.10.20/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fd00::1]/", "unique local"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://224.0.0.1/", "multicast"),
    ],
)
async def test_non_public_addresses_are_refused_at_registration(
    url: str, reason: str, store: Store
) -> None:
    dispatcher = dispatcher_on(store)
    with pytest.raises(WebhookURLRefused, match=reason):
        await dispatcher.enqueue(url, SECRET, "job.finished", {})
    with pytest.raises(WebhookURLRefused, match=reason):
        await dispatcher.check_url(url)
    assert await store.record_list("webhook") == []


async def test_metadata_stays_refused_whatever_the_allow_list(store: Store) -> None:
    dispatcher = dispatcher_on(store, allow=["169.254.0.0/16", "0.0.0.0/0", "169.254.169.254"])
    with pytest.raises(WebhookURLRefused, match="metadata address; webhooks never reach it"):
        await dispatcher.check_url("http://169.254.169.254/")
    # Control: the allow-list does open the rest of the link-local network.
    assert await dispatcher.check_url("http://169.254.10.20/x") == "http://169.254.10.20/x"


# -- names ------------------------------------------------------------------------------


async def test_a_name_is_judged_by_every_address_it_resolves_to(store: Store) -> None:
    dns = FakeDNS(
        {
            "inside.example.test": ["10.1.2.3"],
            "mixed.example.test": ["93.184.215.14", "10.1.2.3"],
            "public.example.test": ["93.184.215.14", "2606:4700:4700::1111"],
        }
    )
    dispatcher = dispatcher_on(store, resolver=dns)
    with pytest.raises(WebhookURLRefused, match=r"resolves to 10\.1\.2\.3, which is a private"):
        await dispatcher.check_url("https://inside.example.test/hook")
    with pytest.raises(WebhookURLRefused, match=r"resolves to 10\.1\.2\.3"):
        await dispatcher.check_url("https://mixed.example.test/hook")
    # Control: a name with public addresses only passes (nothing is sent here).
    assert await dispatcher.check_url("https://public.example.test/hook")
    with pytest.raises(WebhookURLRefused, match=r"cannot resolve the host 'nowhere\.test'"):
        await dispatcher.check_url("https://nowhere.test/hook")


@pytest.mark.parametrize("entry", ["hooks.internal", "*.internal", "HOOKS.Internal."])
async def test_an_allow_listed_name_connects_to_the_checked_address_only(
    entry: str, store: Store, receiver: WireServer
) -> None:
    # The system cannot resolve hooks.internal: the request arrives only because
    # it goes to the address the check produced, with the name in Host.
    dns = FakeDNS({"hooks.internal": ["127.0.0.1"]})
    url = f"http://hooks.internal:{receiver.port}/in"
    with pytest.raises(WebhookURLRefused, match="loopback"):
        await dispatcher_on(store, resolver=dns).check_url(url)

    dispatcher = dispatcher_on(store, resolver=dns, allow=[entry])
    await dispatcher.enqueue(url, SECRET, "job.finished", {})
    [done] = await dispatcher.deliver_due()
    assert done.status == "delivered", done.last_error
    [request] = receiver.requests
    assert request.headers["host"] == f"hooks.internal:{receiver.port}"
    assert request.path == "/in"


async def test_dns_rebinding_after_registration_is_caught_at_delivery(
    store: Store, receiver: WireServer
) -> None:
    dns = FakeDNS({"rebind.test": ["127.0.0.1"]})
    dispatcher = dispatcher_on(store, resolver=dns, allow=["127.0.0.0/8"])
    url = f"http://rebind.test:{receiver.port}/"
    delivery_id = await dispatcher.enqueue(url, SECRET, "job.finished", {})

    for rebound, reason in (("10.9.9.9", "private"), ("169.254.169.254", "metadata")):
        dns.answers["rebind.test"] = [rebound]
        await anyio.sleep(0.02)
        [attempt] = await dispatcher.deliver_due()
        assert attempt.status == "pending"
        assert attempt.last_error is not None
        assert attempt.last_error.startswith("not sent: refused")
        assert rebound in attempt.last_error and reason in attempt.last_error
    assert receiver.connections == 0

    # Control: once the name points at an allowed address again, it is delivered.
    dns.answers["rebind.test"] = ["127.0.0.1"]
    await anyio.sleep(0.02)
    [done] = await dispatcher.deliver_due()
    assert (done.id, done.status, done.attempts) == (delivery_id, "delivered", 3)
    assert len(receiver.requests) == 1
    assert dns.asked == ["rebind.test"] * 4  # once at registration, once per attempt


async def test_a_narrower_allow_list_at_delivery_time_stops_a_stored_delivery(
    store: Store, receiver: WireServer
) -> None:
    permissive = dispatcher_on(store, allow=["127.0.0.0/8"])
    delivery_id = await permissive.enqueue(receiver.url, SECRET, "job.finished", {})
    strict = dispatcher_on(store)  # e.g. restarted with the allow-list removed

    [attempt] = await strict.deliver_due()
    assert attempt.status == "pending"
    assert "loopback" in (attempt.last_error or "")
    assert receiver.connections == 0

    await anyio.sleep(0.02)
    [done] = await permissive.deliver_due()  # control
    assert (done.id, done.status) == (delivery_id, "delivered")


# -- redirects --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_not_followed(status: int, store: Store, receiver: WireServer) -> None:
    with WireServer() as target:
        target.default = Reply.json({"ok": True})
        receiver.push(Reply(status=status, headers={"location": f"{target.url}/landing"}))
        dispatcher = dispatcher_on(store, allow=["127.0.0.0/8"])
        await dispatcher.enqueue(receiver.url, SECRET, "job.finished", {})
        [attempt] = await dispatcher.deliver_due()
        assert target.connections == 0
    assert len(receiver.requests) == 1
    assert attempt.status == "pending"
    assert attempt.last_status_code == status
    assert "redirects are not followed" in (attempt.last_error or "")
    assert "/landing" in (attempt.last_error or "")
    # Control: the receiver answering directly is delivered.
    await anyio.sleep(0.02)
    [done] = await dispatcher.deliver_due()
    assert done.status == "delivered"


# -- malformed URLs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("ftp://example.com/hook", "only http and https"),
        ("example.com/hook", "no scheme"),
        ("http://", "no host|not a valid"),
        ("http://user:pw@example.com/", "user:password@"),
        ("http://exa mple.com/", "not a valid host name"),
        ("http://bad_host!.example/", "not a valid host name"),
        ("http://0177.0.0.1/", "Invalid IPv4"),  # octal: httpx refuses to guess
        ("http://example.com/" + "a" * 3000, "longer than 2048"),
        (42, "must be text"),
    ],
)
async def test_malformed_urls_are_refused_with_what_to_fix(
    url: Any, complaint: str, store: Store
) -> None:
    with pytest.raises(WebhookURLRefused, match=complaint):
        await dispatcher_on(store).enqueue(url, SECRET, "job.finished", {})
    assert await store.record_list("webhook") == []


def test_endpoint_settings_refuse_malformed_urls_and_secrets() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="only http and https"):
        WebhookEndpoint(url="file:///etc/passwd", secrets=[SECRET])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="whsec_"):
        WebhookEndpoint(url="https://h.example/", secrets=["hunter2"])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="event type pattern"):
        WebhookEndpoint(url="https://h.example/", secrets=[SECRET], events=["job*"])  # type: ignore[list-item]
    endpoint = WebhookEndpoint.model_validate(
        {"url": "https://h.example/x", "secrets": [SECRET], "events": ["job.*", "approval"]}
    )
    assert endpoint.matches("job.finished") and endpoint.matches("approval")
    assert not endpoint.matches("jobs.finished") and not endpoint.matches("approval.x")
    assert endpoint.secret_values() == [SECRET]


# -- https: pinned to the address, verified on the name ----------------------------------


class TLSReceiver:
    """An HTTPS server on 127.0.0.1 (stdlib http.server) that records SNI names and requests."""

    def __init__(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server_names: list[str | None] = []
        self.requests: list[tuple[dict[str, str], bytes]] = []

        def remember(_sock: Any, name: str | None, _ctx: Any) -> None:
            self.server_names.append(name)

        context.sni_callback = remember
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def certificate(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
            "-addext", f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[Callable[[str], tuple[TLSReceiver, Path]]]:
    made: list[TLSReceiver] = []

    def make(name: str) -> tuple[TLSReceiver, Path]:
        cert, key = certificate(tmp_path, name)
        made.append(TLSReceiver(cert, key))
        return made[-1], cert

    yield make
    for server in made:
        server.close()


async def test_https_connects_to_the_pinned_address_and_verifies_the_name(
    store: Store, tls_receiver: Callable[[str], tuple[TLSReceiver, Path]]
) -> None:
    server, cert = tls_receiver("hooks.internal")
    trust = ssl.create_default_context(cafile=str(cert))
    dns = FakeDNS({"hooks.internal": ["127.0.0.1"]})
    dispatcher = dispatcher_on(store, resolver=dns, allow=["hooks.internal"], verify=trust)
    delivery_id = await dispatcher.enqueue(
        f"https://hooks.internal:{server.port}/tls", SECRET, "job.finished", {"tls": True}
    )
    [done] = await dispatcher.deliver_due()
    assert done.status == "delivered", done.last_error
    assert server.server_names == ["hooks.internal"]
    [(headers, body)] = server.requests
    assert headers["host"] == f"hooks.internal:{server.port}"
    assert headers["webhook-id"] == delivery_id
    assert verify(SECRET, headers, body)["data"] == {"tls": True}


async def test_https_refuses_a_certificate_for_another_name(
    store: Store, tls_receiver: Callable[[str], tuple[TLSReceiver, Path]]
) -> None:
    server, cert = tls_receiver("other.internal")
    trust = ssl.create_default_context(cafile=str(cert))
    dns = FakeDNS({"hooks.internal": ["127.0.0.1"], "other.internal": ["127.0.0.1"]})
    dispatcher = dispatcher_on(store, resolver=dns, allow=["*.internal"], verify=trust)
    await dispatcher.enqueue(f"https://hooks.internal:{server.port}/", SECRET, "e", {})
    [attempt] = await dispatcher.deliver_due()
    assert attempt.status == "pending"
    assert "certificate" in (attempt.last_error or "").lower()
    assert server.requests == []
    # Control: the name the certificate is for goes through.
    await dispatcher.enqueue(f"https://other.internal:{server.port}/", SECRET, "e", {})
    await anyio.sleep(0.02)
    attempted = await dispatcher.deliver_due()
    assert sorted(d.status for d in attempted) == ["delivered", "pending"]
    assert len(server.requests) == 1
