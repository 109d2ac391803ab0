"""web_fetch's SSRF guard end to end: refusals happen before any connection, pinning holds.

"Before any connection" is proven with counting listeners on the loopback
addresses the URLs point at: a refused fetch leaves their count at zero, and
the control (the same fetch with the address allow-listed) raises it.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import socket
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi.errors import ToolError
from koboi.tools import ToolContext
from koboi_http.guard import AddressPolicy, classify, system_resolver
from koboi_testing.wire import Reply, WireServer
from koboi_tools_web.config import WebSettings
from koboi_tools_web.fetch import FetchRefused, WebFetcher, parse_url
from koboi_tools_web.tools import make_fetch_tool

Listen = Callable[..., Any]

pytestmark = pytest.mark.anyio

LOOPBACK_SPELLINGS = [
    "http://127.1:{port}/",
    "http://0x7f000001:{port}/",
    "http://2130706433:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://localhost.:{port}/",
    "http://localhost:{port}/",
    "http://LOCALHOST:{port}/",
    "http://127.0.0.1:{port}/",
    "http://[::1]:{port}/",
    "http://127。0。0。1:{port}/",  # ideographic full stops: IDNA separators
]


def fetcher(**options: Any) -> WebFetcher:
    return WebFetcher(WebSettings(**options))


def total(listeners: Sequence[Any]) -> int:
    return sum(listener.accepted for listener in listeners)


# -- every loopback spelling -----------------------------------------------------


@pytest.mark.parametrize("template", LOOPBACK_SPELLINGS)
async def test_loopback_in_any_notation_is_refused_before_connecting(
    template: str, loopback_listeners: tuple[Any, Any], listener_body: str
) -> None:
    url = template.format(port=loopback_listeners[0].port)
    with pytest.raises(FetchRefused, match="loopback") as caught:
        await fetcher().fetch(url, 1000)
    assert "public addresses only" in str(caught.value)
    assert total(loopback_listeners) == 0

    # Control: with loopback allow-listed the very same URL reaches a listener.
    allowed = fetcher(allow_networks=["127.0.0.0/8", "::1/128"])
    result = await allowed.fetch(url, 1000)
    assert result.text == listener_body
    assert total(loopback_listeners) == 1


async def test_octal_notation_is_refused_before_connecting(
    loopback_listeners: tuple[Any, Any],
) -> None:
    url = f"http://0177.0.0.1:{loopback_listeners[0].port}/"
    for options in ({}, {"allow_networks": ["127.0.0.0/8"]}):
        # httpx's URL parser refuses leading-zero octets outright, allow-list or not.
        with pytest.raises(FetchRefused, match="not a valid URL"):
            await fetcher(**options).fetch(url, 1000)
    assert total(loopback_listeners) == 0


async def test_octal_notation_resolves_to_loopback_and_the_guard_refuses_it() -> None:
    # The layer below the parser: resolving the octal spelling gives 127.0.0.1,
    # which the policy refuses, and allows once 127.0.0.0/8 is listed.
    assert list(await system_resolver("0177.0.0.1", 80)) == ["127.0.0.1"]
    ip = ipaddress.ip_address("127.0.0.1")
    assert AddressPolicy().check(ip).refusal == "a loopback address"
    assert AddressPolicy(allow_networks=["127.0.0.0/8"]).check(ip).allowed


def _spellings(address: ipaddress.IPv4Address) -> list[str]:
    """Ways inet_aton (and so getaddrinfo, without any DNS query) reads as ``address``."""
    n = int(address)
    a, b, c, d = address.packed
    return [
        str(n),  # 2130706433
        hex(n),  # 0x7f000001
        f"{a}.{n & 0xFFFFFF}",  # 127.1
        f"{a}.{b}.{n & 0xFFFF}",  # 127.0.1
        f"{a:#x}.{b:#x}.{c:#x}.{d:#x}",  # 0x7f.0x0.0x0.0x1
        f"[::ffff:{address}]",
    ]


@settings(max_examples=150, deadline=None)
@given(st.ip_addresses(v=4), st.integers(0, 5))
def test_the_verdict_does_not_depend_on_the_notation(
    address: ipaddress.IPv4Address, which: int
) -> None:
    """Every spelling of an address gets the verdict of the address (nothing is connected)."""
    spelled = _spellings(address)[which]
    guard = WebFetcher(WebSettings())

    async def pin() -> Any:
        return await guard.pin(parse_url(f"http://{spelled}:8080/"))

    reason, _ = classify(address)
    if reason is None:
        assert anyio.run(pin).addresses == (address,)
    else:
        with pytest.raises(FetchRefused, match=re.escape(reason)):
            anyio.run(pin)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/",
        "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one number
    ],
)
async def test_metadata_is_refused_even_when_its_network_is_allowed(
    url: str, loopback_transport: Any, wire: WireServer
) -> None:
    for networks in ([], ["169.254.0.0/16", "fd00::/8", "100.64.0.0/10"]):
        guarded = WebFetcher(WebSettings(allow_networks=networks), transport=loopback_transport)
        with pytest.raises(FetchRefused, match="metadata"):
            await guarded.fetch(url, 1000)
    assert loopback_transport.requests == []

    # Control: the transport does see what the guard lets through.
    wire.default = Reply.raw("fine", content_type="text/plain")
    allowed = WebFetcher(WebSettings(allow_networks=["127.0.0.1/32"]), transport=loopback_transport)
    assert (await allowed.fetch(wire.url, 1000)).text == "fine"
    assert len(loopback_transport.requests) == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd12:3456::1]/", "unique local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://100.64.1.1/", "carrier-grade NAT"),
        ("http://198.18.0.5/", "benchmarking"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://[2002:7f00:1::]/", "6to4 address embedding 127.0.0.1"),
        ("http://[2002:a00:1::]/", "6to4 address embedding 10.0.0.1"),
        ("http://[::127.0.0.1]/", "IPv4-compatible"),
        ("http://[64:ff9b::a00:1]/", "NAT64 address embedding 10.0.0.1"),
        ("http://167772161/", "private"),  # 10.0.0.1 as one number
        ("http://0xa000001/", "private"),
    ],
)
async def test_other_non_public_addresses_are_refused(
    url: str, reason: str, loopback_transport: Any
) -> None:
    guarded = WebFetcher(WebSettings(), transport=loopback_transport)
    with pytest.raises(FetchRefused, match=reason):
        await guarded.fetch(url, 1000)
    assert loopback_transport.requests == []


async def test_one_private_record_among_public_ones_refuses_the_host(
    loopback_transport: Any,
) -> None:
    async def resolver(host: str, port: int) -> Sequence[str]:
        return ["93.184.215.14", "10.1.2.3"]

    guarded = WebFetcher(WebSettings(), resolver=resolver, transport=loopback_transport)
    with pytest.raises(FetchRefused, match=r"'mixed\.test' resolves to 10\.1\.2\.3"):
        await guarded.fetch("http://mixed.test/", 1000)
    assert loopback_transport.requests == []


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.org/", "gopher://x/", "data:text/plain,hi", "/etc"],
)
async def test_only_http_and_https(url: str) -> None:
    with pytest.raises(FetchRefused):
        await fetcher().fetch(url, 1000)


async def test_credentials_in_the_url_are_refused(wire: WireServer) -> None:
    url = wire.url.replace("http://", "http://user:pw@")
    with pytest.raises(FetchRefused, match="user:password"):
        await fetcher(allow_networks=["127.0.0.1/32"]).fetch(url, 1000)
    assert wire.connections == 0


async def test_unresolvable_names_are_a_clear_error() -> None:
    async def resolver(host: str, port: int) -> Sequence[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(ToolError, match=r"cannot resolve host 'nowhere\.invalid'"):
        await WebFetcher(WebSettings(), resolver=resolver).fetch("http://nowhere.invalid/", 100)


# -- the allow-list ------------------------------------------------------------


async def test_allow_hosts_admits_that_name_only(wire: WireServer) -> None:
    wire.default = Reply.raw("intranet page", content_type="text/plain")

    async def resolver(host: str, port: int) -> Sequence[str]:
        return {"wiki.corp": ["127.0.0.1"], "other.corp": ["127.0.0.1"]}[host]

    settings = WebSettings(allow_hosts=["wiki.corp"])
    allowed = WebFetcher(settings, resolver=resolver)
    result = await allowed.fetch(f"http://WIKI.corp.:{wire.port}/", 1000)
    assert result.text == "intranet page"
    assert wire.requests[0].headers["host"] == f"wiki.corp:{wire.port}"
    with pytest.raises(FetchRefused, match="loopback"):
        await allowed.fetch(f"http://other.corp:{wire.port}/", 1000)
    with pytest.raises(FetchRefused, match="loopback"):
        await allowed.fetch(f"http://127.0.0.1:{wire.port}/", 1000)  # a name, not the address
    assert len(wire.requests) == 1


async def test_allow_hosts_wildcard_and_address_entries(wire: WireServer) -> None:
    wire.default = Reply.raw("ok", content_type="text/plain")

    async def resolver(host: str, port: int) -> Sequence[str]:
        return ["127.0.0.1"]

    wildcard = WebFetcher(WebSettings(allow_hosts=["*.corp"]), resolver=resolver)
    assert (await wildcard.fetch(f"http://a.b.corp:{wire.port}/", 100)).text == "ok"
    with pytest.raises(FetchRefused):
        await wildcard.fetch(f"http://corp:{wire.port}/", 100)
    with pytest.raises(FetchRefused):
        await wildcard.fetch(f"http://evilcorp:{wire.port}/", 100)

    by_address = WebFetcher(WebSettings(allow_hosts=["127.0.0.1"]))
    assert (await by_address.fetch(f"http://127.1:{wire.port}/", 100)).text == "ok"


async def test_allow_networks_is_exact(wire: WireServer) -> None:
    wire.default = Reply.raw("ok", content_type="text/plain")
    narrow = fetcher(allow_networks=["127.0.0.2/32"])
    with pytest.raises(FetchRefused, match="loopback"):
        await narrow.fetch(wire.url, 100)
    assert wire.connections == 0
    assert (await fetcher(allow_networks=["127.0.0.1/32"]).fetch(wire.url, 100)).text == "ok"


# -- redirects -------------------------------------------------------------------


async def test_redirect_to_a_non_allowed_address_is_refused_before_connecting(
    wire: WireServer, listen: Listen, listener_body: str
) -> None:
    elsewhere = listen("127.0.0.2")
    target = f"http://127.0.0.2:{elsewhere.port}/secret"
    wire.default = Reply(status=302, headers={"location": target})
    with pytest.raises(FetchRefused, match="not following a redirect") as caught:
        await fetcher(allow_networks=["127.0.0.1/32"]).fetch(wire.url + "/start", 1000)
    assert "127.0.0.2" in str(caught.value) and "loopback" in str(caught.value)
    assert len(wire.requests) == 1
    assert elsewhere.accepted == 0

    # Control: allow 127.0.0.2 too, and the redirect is followed to the listener.
    both = fetcher(allow_networks=["127.0.0.1/32", "127.0.0.2/32"])
    result = await both.fetch(wire.url + "/start", 1000)
    assert result.text == listener_body
    assert result.final_url == target
    assert result.redirects == [target]
    assert elsewhere.accepted == 1


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://10.0.0.1/admin",
        "http://[::ffff:10.0.0.1]/",
        "http://0xa9fea9fe/",  # 169.254.169.254
    ],
)
async def test_redirect_to_private_or_metadata_is_refused(
    location: str, wire: WireServer, loopback_transport: Any
) -> None:
    wire.default = Reply(status=301, headers={"location": location})
    guarded = WebFetcher(WebSettings(allow_networks=["127.0.0.1/32"]), transport=loopback_transport)
    with pytest.raises(FetchRefused, match="not following a redirect"):
        await guarded.fetch(wire.url, 1000)
    # Only the first hop reached the transport; the target never did.
    assert [r.url.host for r in loopback_transport.requests] == ["127.0.0.1"]


async def test_redirect_to_an_allowed_target_is_followed(wire: WireServer) -> None:
    wire.handler = lambda request: (
        Reply.raw("<h1>Final</h1>", content_type="text/html")
        if request.path == "/final"
        else Reply(status=307, headers={"location": "/final"})
    )
    result = await fetcher(allow_networks=["127.0.0.1/32"]).fetch(wire.url + "/a", 1000)
    assert result.text == "# Final"
    assert result.final_url == wire.url + "/final"
    rendered = result.render()
    assert f"Redirected from: {wire.url}/a" in rendered
    assert [r.path for r in wire.requests] == ["/a", "/final"]


async def test_redirect_loop_stops_at_the_cap(wire: WireServer) -> None:
    wire.default = Reply(status=302, headers={"location": "/again"})
    with pytest.raises(ToolError, match="more than 2 times"):
        await fetcher(allow_networks=["127.0.0.1/32"], max_redirects=2).fetch(wire.url, 1000)
    assert len(wire.requests) == 3


async def test_redirect_to_another_scheme_is_refused(wire: WireServer) -> None:
    wire.default = Reply(status=302, headers={"location": "file:///etc/passwd"})
    with pytest.raises(FetchRefused, match="only http and https"):
        await fetcher(allow_networks=["127.0.0.1/32"]).fetch(wire.url, 1000)


# -- pinning -----------------------------------------------------------------------


class FlippingResolver:
    """Answers 127.0.0.1 the first time, then 127.0.0.2: a DNS rebinding attacker."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        return ["127.0.0.1"] if len(self.calls) == 1 else ["127.0.0.2"]


async def test_a_changed_dns_answer_cannot_move_the_connection(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch, listen: Listen
) -> None:
    wire.default = Reply.raw("checked address", content_type="text/plain")
    rebound = listen("127.0.0.2", wire.port)
    # Any lookup made behind our back (by httpx, httpcore or anyio) gets the
    # rebound answer from the system resolver too.
    real = socket.getaddrinfo

    def rebinding_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("rebind.test", b"rebind.test"):
            return real("127.0.0.2", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_getaddrinfo)
    resolver = FlippingResolver()
    pinned = WebFetcher(WebSettings(allow_networks=["127.0.0.1/32"]), resolver=resolver)
    result = await pinned.fetch(f"http://rebind.test:{wire.port}/page", 1000)

    assert result.text == "checked address"
    assert result.connected_to == "127.0.0.1"
    assert resolver.calls == ["rebind.test"]  # one lookup: the one that was checked
    assert wire.requests[0].headers["host"] == f"rebind.test:{wire.port}"
    assert rebound.accepted == 0

    # Control: the listener on the rebound address does count connections.
    rebound_fetch = fetcher(allow_networks=["127.0.0.2/32"])
    assert (await rebound_fetch.fetch(f"http://127.0.0.2:{wire.port}/", 100)).text
    assert rebound.accepted == 1


async def test_each_redirect_hop_is_resolved_and_checked_again(
    wire: WireServer, listen: Listen
) -> None:
    rebound = listen("127.0.0.2", wire.port)
    wire.default = Reply(status=302, headers={"location": f"http://rebind.test:{wire.port}/second"})
    resolver = FlippingResolver()
    pinned = WebFetcher(WebSettings(allow_networks=["127.0.0.1/32"]), resolver=resolver)
    with pytest.raises(FetchRefused, match=r"resolves to 127\.0\.0\.2"):
        await pinned.fetch(f"http://rebind.test:{wire.port}/first", 1000)
    assert resolver.calls == ["rebind.test", "rebind.test"]
    assert rebound.accepted == 0


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_https_is_pinned_with_sni_and_verified_for_the_name(
    tmp_path: Path, tls_server: Callable[[str, Path], Any]
) -> None:
    server = tls_server("pinned.test", tmp_path)

    async def resolver(host: str, port: int) -> Sequence[str]:
        return ["127.0.0.1"]

    trust = ssl.create_default_context(cafile=str(server.certificate))
    pinned = WebFetcher(
        WebSettings(allow_hosts=["pinned.test", "other.test"]), resolver=resolver, verify=trust
    )
    result = await pinned.fetch(f"https://pinned.test:{server.port}/", 1000)
    assert result.title == "TLS"
    assert result.text == "over tls"
    assert server.server_names == ["pinned.test"]  # SNI carries the name, not the IP
    assert server.hosts == [f"pinned.test:{server.port}"]

    # Control: the same certificate does not pass for another name on that address.
    with pytest.raises(ToolError, match=r"(?i)certificate|hostname"):
        await pinned.fetch(f"https://other.test:{server.port}/", 1000)


async def test_the_tool_refuses_loopback_with_an_error_result(
    loopback_listeners: tuple[Any, Any], context: ToolContext
) -> None:
    tool = make_fetch_tool(WebSettings())
    args = tool.parse_arguments({"url": f"http://127.1:{loopback_listeners[0].port}/"})
    with pytest.raises(ToolError, match="loopback"):
        await tool(args, context)
    assert total(loopback_listeners) == 0
