"""What web_fetch reads and returns: caps on size and time, content types, text quality."""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib
from typing import Any

import pytest

from koboi.errors import ToolError
from koboi.tools import ToolContext
from koboi_testing.wire import Reply, WireServer
from koboi_tools_web.config import WebSettings
from koboi_tools_web.fetch import WebFetcher
from koboi_tools_web.tools import make_fetch_tool

pytestmark = pytest.mark.anyio

LOOPBACK = ["127.0.0.1/32"]
SAMPLE_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Release notes &ndash; Widget 2.0</title>
  <style>.hero { color: #333 }</style>
  <script>window.analytics = {track: function(){}}; document.write("<p>tracking</p>");</script>
</head>
<body>
  <nav><a href="/">Home</a> <a href="/docs/">Docs</a></nav>
  <main>
    <h1>Widget 2.0 is out</h1>
    <p>Widget 2.0 brings <strong>faster sync</strong> and a new
       <a href="/docs/api.html">API reference</a>.</p>
    <h2>Changes</h2>
    <ul>
      <li>Sync is 3&times; faster</li>
      <li>Offline mode <em>(beta)</em></li>
    </ul>
    <table>
      <tr><th>Version</th><th>Date</th></tr>
      <tr><td>2.0</td><td>2025-03-01</td></tr>
    </table>
    <pre>pip install widget==2.0
widget --version</pre>
    <p>Questions? <a href="mailto:help@example.org">Mail us</a> or see
       <a href="https://forum.example.org/t/widget">the forum</a>.</p>
  </main>
  <footer><p>&copy; 2025 Example</p><script>trackPageView()</script></footer>
  <noscript><img src="/pixel.gif" alt="tracking pixel"></noscript>
</body>
</html>
"""


def fetcher(**settings: Any) -> WebFetcher:
    return WebFetcher(WebSettings(allow_networks=LOOPBACK, **settings))


async def test_html_becomes_readable_text(wire: WireServer) -> None:
    wire.default = Reply.raw(SAMPLE_PAGE, content_type="text/html; charset=utf-8")
    result = await fetcher().fetch(wire.url + "/news/widget-2.html", 20_000)
    base = wire.url
    assert result.title == "Release notes \u2013 Widget 2.0"
    assert result.text == (
        f"Home [{base}/] Docs [{base}/docs/]\n"
        "\n"
        "# Widget 2.0 is out\n"
        "\n"
        f"Widget 2.0 brings faster sync and a new API reference [{base}/docs/api.html].\n"
        "\n"
        "## Changes\n"
        "\n"
        "- Sync is 3\u00d7 faster\n"
        "- Offline mode (beta)\n"
        "\n"
        "Version | Date\n"
        "2.0 | 2025-03-01\n"
        "\n"
        "pip install widget==2.0\n"
        "widget --version\n"
        "\n"
        "Questions? Mail us or see the forum [https://forum.example.org/t/widget].\n"
        "\n"
        "© 2025 Example"
    )
    for dropped in ("analytics", "tracking", "color", "trackPageView"):
        assert dropped not in result.text
    rendered = result.render()
    assert rendered.startswith(f"URL: {base}/news/widget-2.html\nStatus: 200 OK\n")
    assert "Title: Release notes \u2013 Widget 2.0" in rendered
    assert "Truncated" not in rendered


async def test_size_cap_stops_reading_a_50_mb_stream(wire: WireServer) -> None:
    block = b"a" * 65536
    wire.default = Reply(
        headers={"content-type": "text/plain"}, chunks=[block] * 800, content_length=False
    )  # 50 MiB, chunked, more than any cap here
    cap = 1_000_000
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = await fetcher(max_bytes=cap).fetch(wire.url, 500)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert result.bytes_read == cap
    assert result.text == "a" * 500
    assert any("stopped reading after 1000000 bytes" in t for t in result.truncated)
    assert "max_chars=500" in " ".join(result.truncated)
    assert "Truncated: stopped reading" in result.render()
    assert peak < 20_000_000, f"peak memory {peak} bytes"
    assert elapsed < 10


async def test_below_the_cap_nothing_is_truncated(wire: WireServer) -> None:
    wire.default = Reply.raw("b" * 5000, content_type="text/plain")
    result = await fetcher(max_bytes=5000).fetch(wire.url, 10_000)
    assert result.text == "b" * 5000
    assert result.truncated == []


async def test_a_gzip_bomb_is_decoded_only_up_to_the_cap(wire: WireServer) -> None:
    bomb = gzip.compress(b"z" * 200_000_000, compresslevel=9)  # ~200 KB on the wire
    assert len(bomb) < 1_000_000
    wire.default = Reply.raw(bomb, content_type="text/plain", headers={"content-encoding": "gzip"})
    tracemalloc.start()
    try:
        result = await fetcher(max_bytes=2_000_000).fetch(wire.url, 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.bytes_read == 2_000_000
    assert result.text == "z" * 100
    assert peak < 30_000_000, f"peak memory {peak} bytes"


@pytest.mark.parametrize(
    "encode",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
    ],
)
async def test_compressed_bodies_are_decoded(wire: WireServer, encode: Any) -> None:
    name, compress = encode
    wire.default = Reply.raw(
        compress(b"<p>squeezed text</p>"),
        content_type="text/html",
        headers={"content-encoding": name},
    )
    assert (await fetcher().fetch(wire.url, 1000)).text == "squeezed text"


async def test_a_hung_server_is_a_clear_timeout(wire: WireServer) -> None:
    wire.default = Reply.raw("late", content_type="text/plain", hang_before=30)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"timed out: fetching .* took longer than 0.5 s"):
        await fetcher(timeout=0.5).fetch(wire.url, 100)
    assert time.monotonic() - started < 3


async def test_a_stream_that_stalls_returns_what_arrived(wire: WireServer) -> None:
    wire.default = Reply(
        headers={"content-type": "text/plain"},
        chunks=[b"first part ", b"never arrives"],
        content_length=False,
        stall_after=1,
        stall_seconds=30,
    )
    started = time.monotonic()
    result = await fetcher(timeout=1).fetch(wire.url, 100)
    assert result.text == "first part "
    assert any("time limit" in t for t in result.truncated)
    assert time.monotonic() - started < 3


async def test_connection_refused_is_a_clear_error(listen: Any) -> None:
    port = listen("127.0.0.1").port
    listen_closed = listen("127.0.0.2", port)
    listen_closed.close()  # nothing listens on 127.0.0.2:port any more
    with pytest.raises(ToolError, match="cannot connect"):
        await WebFetcher(WebSettings(allow_networks=["127.0.0.2/32"])).fetch(
            f"http://127.0.0.2:{port}/", 100
        )


@pytest.mark.parametrize(
    "content_type", ["image/png", "application/pdf", "application/octet-stream", "video/mp4"]
)
async def test_binary_content_is_refused_with_a_note(wire: WireServer, content_type: str) -> None:
    wire.default = Reply.raw(b"\x89PNG\r\n\x1a\n\x00\x00", content_type=content_type)
    with pytest.raises(ToolError, match=f"content type is {content_type}, which is not text"):
        await fetcher().fetch(wire.url, 100)


async def test_untyped_binary_is_refused_and_untyped_text_is_read(wire: WireServer) -> None:
    wire.push(Reply(chunks=[b"\x00\x01\x02binary"]), Reply(chunks=[b"just words"]))
    with pytest.raises(ToolError, match="no content type and looks binary"):
        await fetcher().fetch(wire.url, 100)
    assert (await fetcher().fetch(wire.url, 100)).text == "just words"


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", b'{"a":[1,2]}', '{\n  "a": [\n    1,\n    2\n  ]\n}'),
        ("application/problem+json", b'{"title":"x"}', '{\n  "title": "x"\n}'),
        ("application/xml", b"<a><b>1</b></a>", "<a><b>1</b></a>"),
        ("application/rss+xml", b"<rss/>", "<rss/>"),
        ("text/plain; charset=latin-1", "café".encode("latin-1"), "café"),
        ("text/csv", b"a,b\n1,2", "a,b\n1,2"),
        ("text/markdown", "# Titre\n\nCafé ☕".encode(), "# Titre\n\nCafé ☕"),
    ],
)
async def test_text_json_and_xml_are_returned_as_text(
    wire: WireServer, content_type: str, body: bytes, expected: str
) -> None:
    wire.default = Reply.raw(body, content_type=content_type)
    assert (await fetcher().fetch(wire.url, 1000)).text == expected


async def test_html_charset_from_the_meta_tag(wire: WireServer) -> None:
    page = '<meta charset="windows-1252"><p>naïve “quotes”</p>'.encode("cp1252")
    wire.default = Reply.raw(page, content_type="text/html")
    assert (await fetcher().fetch(wire.url, 1000)).text == "naïve “quotes”"


async def test_error_status_is_returned_with_its_body(
    wire: WireServer, context: ToolContext
) -> None:
    wire.default = Reply.raw("<h1>Not here</h1>", content_type="text/html", status=404)
    tool = make_fetch_tool(WebSettings(allow_networks=LOOPBACK))
    result = await tool(tool.parse_arguments({"url": wire.url + "/missing"}), context)
    assert result.is_error
    assert "Status: 404 Not Found" in result.content
    assert result.content.endswith("# Not here")
    assert result.data["status"] == 404


async def test_the_tool_returns_text_and_data(wire: WireServer, context: ToolContext) -> None:
    wire.default = Reply.raw(
        "<title>T</title><p>" + "word " * 100 + "</p>", content_type="text/html"
    )
    tool = make_fetch_tool(WebSettings(allow_networks=LOOPBACK))
    result = await tool(tool.parse_arguments({"url": wire.url, "max_chars": 100}), context)
    assert not result.is_error
    assert result.content.startswith(f"URL: {wire.url}\nStatus: 200 OK\nContent-Type: text/html")
    assert "Truncated: the text is longer than max_chars=100" in result.content
    assert result.data["truncated"] is True
    assert result.data["title"] == "T"
    assert wire.requests[0].headers["user-agent"].startswith("koboi-tools-web/")
