"""The address policy on its own: what is public, what is not, and what the allow-list changes."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi_http.guard import (
    AddressPolicy,
    classify,
    normalize_allowed_host,
    normalize_allowed_network,
)

PUBLIC = ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4007::1"]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    verdict = AddressPolicy().check(ipaddress.ip_address(address))
    assert verdict.allowed
    assert str(verdict.address) == address


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "RFC 1918"),
        ("172.31.255.255", "RFC 1918"),
        ("192.168.0.1", "RFC 1918"),
        ("fc00::1", "unique local"),
        ("fdff:ffff::1", "unique local"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::fb", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.255", "carrier-grade NAT"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("192.0.2.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "RFC 1918"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("::10.0.0.1", "IPv4-compatible"),
        ("2002:7f00:1::1", "6to4 address embedding 127.0.0.1"),
        ("2002:a9fe:a9fe::", "6to4 address embedding 169.254.169.254, a cloud metadata"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo"),  # client 10.0.0.1
        ("64:ff9b::c0a8:101", "NAT64 address embedding 192.168.1.1"),
        ("64:ff9b:1::1", "NAT64"),
        ("fec0::1", "site-local"),
        ("100::1", "discard"),
    ],
)
def test_non_public_addresses_are_refused_with_a_reason(address: str, reason: str) -> None:
    verdict = AddressPolicy().check(ipaddress.ip_address(address))
    assert not verdict.allowed
    assert verdict.refusal is not None
    assert reason in verdict.refusal or reason.replace("RFC 1918", "private") in verdict.refusal


def test_mapped_addresses_are_checked_and_connected_as_ipv4() -> None:
    policy = AddressPolicy(allow_networks=["127.0.0.0/8"])
    verdict = policy.check(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert verdict.allowed
    assert verdict.address == ipaddress.IPv4Address("127.0.0.1")


def test_allow_networks_cover_exactly_their_range() -> None:
    policy = AddressPolicy(allow_networks=["10.20.0.0/16", "fd12:3456::/32"])
    assert policy.check(ipaddress.ip_address("10.20.5.5")).allowed
    assert policy.check(ipaddress.ip_address("fd12:3456::9")).allowed
    assert not policy.check(ipaddress.ip_address("10.21.0.1")).allowed
    assert not policy.check(ipaddress.ip_address("fd12:3457::9")).allowed
    assert not policy.check(ipaddress.ip_address("127.0.0.1")).allowed


def test_metadata_stays_refused_whatever_the_allow_list_says() -> None:
    policy = AddressPolicy(
        allow_hosts=["169.254.169.254", "metadata.google.internal"],
        allow_networks=["0.0.0.0/0", "::/0"],
    )
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "2002:a9fe:a9fe::"):
        assert not policy.check(ipaddress.ip_address(address), host_allowed=True).allowed
    # Control: the same policy lets the rest of link-local through.
    assert policy.check(ipaddress.ip_address("169.254.1.1")).allowed


def test_allow_hosts_names_and_wildcards() -> None:
    policy = AddressPolicy(allow_hosts=["wiki.corp", "*.lab.corp"])
    assert policy.host_allowed("wiki.corp")
    assert policy.host_allowed("a.lab.corp")
    assert policy.host_allowed("a.b.lab.corp")
    assert not policy.host_allowed("lab.corp")
    assert not policy.host_allowed("xlab.corp")
    assert not policy.host_allowed("wiki.corp.evil")


@given(st.ip_addresses(v=4))
def test_every_ipv4_form_gets_the_same_verdict(address: ipaddress.IPv4Address) -> None:
    """An address refused as IPv4 is refused as IPv4-mapped and 6to4 IPv6 too."""
    direct, _ = classify(address)
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert classify(mapped)[0] == direct
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80))
    if direct is not None:
        assert classify(sixtofour)[0] is not None


@given(st.ip_addresses())
def test_allowed_means_globally_routable(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    verdict = AddressPolicy().check(address)
    if verdict.allowed:
        assert verdict.address.is_global
        assert not verdict.address.is_loopback and not verdict.address.is_private


# -- allow-list entries ------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("Wiki.Corp.", "wiki.corp"),
        ("*.Lab.Corp", "*.lab.corp"),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("bücher.example", "xn--bcher-kva.example"),
        (" hooks.corp ", "hooks.corp"),
    ],
)
def test_host_entries_are_normalized(entry: str, normalized: str) -> None:
    assert normalize_allowed_host(entry) == normalized


@pytest.mark.parametrize("entry", ["a..b", "*", "a.*.b", "", "x" * 64 + ".corp"])
def test_malformed_host_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        normalize_allowed_host(entry)


def test_network_entries_are_canonical_and_strict() -> None:
    assert normalize_allowed_network("10.0.0.0/8") == "10.0.0.0/8"
    assert normalize_allowed_network("FD12:3456:0::/48") == "fd12:3456::/48"
    for entry in ("10.0.0.1/8", "intranet", "10.0.0.0/33"):
        with pytest.raises(ValueError, match="not a CIDR network"):
            normalize_allowed_network(entry)
