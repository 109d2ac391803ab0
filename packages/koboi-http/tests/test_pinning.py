"""Pinning: what is checked is what is connected to, on a real loopback server.

A scripted resolver stands in for DNS (so a name can "point" at a loopback
address), and ``WireServer`` on 127.0.0.1 shows what really arrived: the
Host header keeps the name while the connection went to the checked address.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from collections.abc import Sequence

import httpx
import pytest

from koboi_http.guard import AddressPolicy
from koboi_http.pinning import (
    AddressRefused,
    HostUnresolved,
    PinnedTarget,
    pin,
    pinned_client,
    send_pinned,
)
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

LOOPBACK = AddressPolicy(allow_networks=["127.0.0.0/8"])


class ScriptedDNS:
    """Answers from a table; counts questions, so a second lookup would show."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- pin: resolve once, check every answer -------------------------------------------


async def test_a_name_is_normalized_resolved_once_and_its_addresses_kept_in_order() -> None:
    dns = ScriptedDNS({"hooks.test": ["127.0.0.2", "::ffff:127.0.0.1", "127.0.0.1"]})
    target = await pin(httpx.URL("http://HOOKS.test.:8080/x"), LOOPBACK, dns)
    assert dns.asked == ["hooks.test"]
    assert target.host == "hooks.test"
    # The mapped form is the IPv4 address it carries: listed once.
    assert target.addresses == (
        ipaddress.IPv4Address("127.0.0.2"),
        ipaddress.IPv4Address("127.0.0.1"),
    )


async def test_an_address_literal_is_not_resolved() -> None:
    dns = ScriptedDNS({})
    target = await pin(httpx.URL("http://[::ffff:127.0.0.1]:81/"), LOOPBACK, dns)
    assert dns.asked == []
    assert target.addresses == (ipaddress.IPv4Address("127.0.0.1"),)


async def test_one_refused_answer_refuses_the_host() -> None:
    dns = ScriptedDNS({"mixed.test": ["93.184.215.14", "10.1.2.3"]})
    with pytest.raises(
        AddressRefused, match=r"'mixed\.test' resolves to 10\.1\.2\.3, which is a private"
    ) as caught:
        await pin(httpx.URL("https://mixed.test/"), AddressPolicy(), dns)
    assert caught.value.liftable
    # Control: the public answer alone passes.
    dns.answers["mixed.test"] = ["93.184.215.14"]
    assert (await pin(httpx.URL("https://mixed.test/"), AddressPolicy(), dns)).addresses


async def test_metadata_and_non_addresses_cannot_be_allow_listed() -> None:
    everything = AddressPolicy(allow_networks=["0.0.0.0/0"])
    with pytest.raises(AddressRefused, match=r"'169\.254\.169\.254' is a cloud metadata") as caught:
        await pin(httpx.URL("http://169.254.169.254/"), everything)
    assert not caught.value.liftable
    dns = ScriptedDNS({"odd.test": ["not-an-ip"]})
    with pytest.raises(AddressRefused, match="which is not an address") as caught:
        await pin(httpx.URL("http://odd.test/"), everything, dns)
    assert not caught.value.liftable


async def test_a_host_that_does_not_resolve() -> None:
    dns = ScriptedDNS({"empty.test": []})
    with pytest.raises(HostUnresolved, match="not known") as caught:
        await pin(httpx.URL("http://nowhere.test/"), LOOPBACK, dns)
    assert caught.value.host == "nowhere.test"
    with pytest.raises(HostUnresolved, match="no addresses"):
        await pin(httpx.URL("http://empty.test/"), LOOPBACK, dns)


# -- the request: to the checked address, named as the URL named it ------------------


def test_what_a_pinned_request_carries() -> None:
    v4, v6 = ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1")
    named = PinnedTarget(httpx.URL("https://hooks.test:8443/p?q=1#frag"), "hooks.test", (v4,))
    assert named.host_header() == "hooks.test:8443"
    assert str(named.url_for(v4)) == "https://127.0.0.1:8443/p?q=1"
    assert str(named.url_for(v6)) == "https://[::1]:8443/p?q=1"
    assert named.extensions() == {"sni_hostname": "hooks.test"}
    literal = PinnedTarget(httpx.URL("https://[::1]/"), "::1", (v6,))
    assert literal.host_header() == "[::1]"
    assert literal.extensions() == {}  # an address is verified as itself
    plain = PinnedTarget(httpx.URL("http://hooks.test/"), "hooks.test", (v4,))
    assert plain.extensions() == {}


async def test_the_request_goes_to_the_address_with_the_name_in_host() -> None:
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        dns = ScriptedDNS({"hooks.test": ["127.0.0.1"]})
        target = await pin(httpx.URL(f"http://hooks.test:{server.port}/in?x=1"), LOOPBACK, dns)
        async with pinned_client(timeout=5, connect_timeout=2) as client:
            response, address = await send_pinned(
                client, "POST", target, headers={"host": "evil.test", "X-A": "1"}, content=b"{}"
            )
            await response.aread()
            await response.aclose()
    assert response.status_code == 200
    assert address == ipaddress.IPv4Address("127.0.0.1")
    [received] = server.requests
    assert received.headers["host"] == f"hooks.test:{server.port}"  # the caller's Host ignored
    assert received.path == "/in?x=1"
    assert received.headers["x-a"] == "1" and received.body == b"{}"
    assert dns.asked == ["hooks.test"]  # sending looked nothing up


async def test_an_address_that_refuses_the_connection_gives_way_to_the_next() -> None:
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        # The server listens on 127.0.0.1 only: 127.0.0.2 on that port refuses.
        dns = ScriptedDNS({"two.test": ["127.0.0.2", "127.0.0.1"]})
        target = await pin(httpx.URL(f"http://two.test:{server.port}/"), LOOPBACK, dns)
        async with pinned_client(timeout=5, connect_timeout=2) as client:
            response, address = await send_pinned(client, "GET", target)
            await response.aclose()
    assert address == ipaddress.IPv4Address("127.0.0.1")
    assert server.connections == 1


async def test_when_no_address_accepts_the_connect_error_is_raised() -> None:
    target = await pin(httpx.URL(f"http://127.0.0.1:{closed_port()}/"), LOOPBACK)
    async with pinned_client(timeout=5, connect_timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await send_pinned(client, "GET", target)


async def test_https_to_a_name_carries_sni_and_the_ip_in_the_url() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    dns = ScriptedDNS({"secure.test": ["127.0.0.1"]})
    target = await pin(httpx.URL("https://secure.test/hook"), LOOPBACK, dns)
    async with pinned_client(
        timeout=5, connect_timeout=2, transport=httpx.MockTransport(handler)
    ) as client:
        response, _ = await send_pinned(client, "GET", target)
        await response.aclose()
    [request] = seen
    assert request.url.host == "127.0.0.1"
    assert request.headers["host"] == "secure.test"
    assert request.extensions["sni_hostname"] == "secure.test"


async def test_the_client_ignores_proxies_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy would resolve the name again; the one named here does not even exist.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    with WireServer() as server:
        server.default = Reply.json({"ok": True})
        target = await pin(httpx.URL(f"http://127.0.0.1:{server.port}/"), LOOPBACK)
        async with pinned_client(timeout=5, connect_timeout=2) as client:
            response, _ = await send_pinned(client, "GET", target)
            await response.aclose()
            assert not client.follow_redirects
    assert response.status_code == 200
    assert len(server.requests) == 1


def test_importing_the_guard_and_pinning_does_not_load_httpx() -> None:
    code = "import sys, koboi_http.guard, koboi_http.pinning; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
