"""web_search's backends: offline determinism, and each API's wire format served on loopback."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote

import pytest

from koboi.errors import ToolError
from koboi.tools import Risk, ToolContext
from koboi_testing.wire import Reply, WireServer
from koboi_tools_web.config import WebSettings
from koboi_tools_web.tools import make_search_tool

pytestmark = pytest.mark.anyio

BRAVE_KEY = "BSAk3y-0123456789abcdefTEST"
FIRECRAWL_KEY = "fc-5e3c7a9b1d2f4e6a8c0b2d4f6a8c0e2TEST"

BRAVE_ANSWER: dict[str, Any] = {
    "type": "search",
    "query": {"original": "python asyncio", "more_results_available": True},
    "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": False}]},
    "web": {
        "type": "search",
        "family_friendly": True,
        "results": [
            {
                "title": "asyncio — Asynchronous I/O — Python 3.13 documentation",
                "url": "https://docs.python.org/3/library/asyncio.html",
                "is_source_local": False,
                "is_source_both": False,
                "description": (
                    "<strong>asyncio</strong> is a library to write concurrent code using the "
                    "<strong>async</strong>/await syntax."
                ),
                "page_age": "2025-01-10T08:12:00",
                "profile": {"name": "Python documentation", "long_name": "docs.python.org"},
                "language": "en",
                "family_friendly": True,
                "type": "search_result",
                "subtype": "generic",
                "meta_url": {
                    "scheme": "https",
                    "netloc": "docs.python.org",
                    "hostname": "docs.python.org",
                    "path": "/3/library/asyncio.html",
                },
                "extra_snippets": ["asyncio provides a set of high-level APIs..."],
            },
            {
                "title": "Python &amp; <strong>asyncio</strong>: a tutorial",
                "url": "https://realpython.com/async-io-python/",
                "description": "A hands-on walkthrough of async IO in Python.",
                "type": "search_result",
            },
            {"title": "no url here", "type": "search_result"},
        ],
    },
}

DDG_PAGE = """<!DOCTYPE html>
<html><head><title>python asyncio at DuckDuckGo</title></head>
<body>
<div class="serp__results"><div id="links" class="results">
  <div class="result results_links results_links_deep result--ad ">
    <div class="links_main links_deep result__body">
      <h2 class="result__title">
        <a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;ad_provider=bing">Buy async courses</a>
      </h2>
      <a class="result__snippet" href="https://duckduckgo.com/y.js?ad_domain=ads.example">Sponsored.</a>
    </div>
  </div>
  <div class="result results_links results_links_deep web-result ">
    <div class="links_main links_deep result__body">
      <h2 class="result__title">
        <a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.python.org%2F3%2Flibrary%2Fasyncio.html&amp;rut=7c1f">asyncio &mdash; Asynchronous I/O &mdash; <b>Python</b> 3.13 documentation</a>
      </h2>
      <div class="result__extras">
        <div class="result__extras__url">
          <span class="result__icon"><img class="result__icon__img" width="16" height="16" alt="" src="//external-content.duckduckgo.com/ip3/docs.python.org.ico" name="i15" /></span>
          <a class="result__url" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.python.org%2F3%2Flibrary%2Fasyncio.html&amp;rut=7c1f">docs.python.org/3/library/asyncio.html</a>
        </div>
      </div>
      <a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.python.org%2F3%2Flibrary%2Fasyncio.html&amp;rut=7c1f"><b>asyncio</b> is a library to write concurrent code using the async/await syntax.</a>
      <div class="clear"></div>
    </div>
  </div>
  <div class="result results_links results_links_deep web-result ">
    <div class="links_main links_deep result__body">
      <h2 class="result__title">
        <a rel="nofollow" class="result__a" href="https://realpython.com/async-io-python/">Async IO in <b>Python</b>: A Complete Walkthrough</a>
      </h2>
      <a class="result__snippet" href="https://realpython.com/async-io-python/">This tutorial will give you a firm grasp of <b>Python&#x27;s</b> approach to async IO.</a>
    </div>
  </div>
  <div class="nav-link">
    <form action="/html/" method="post"><input type="submit" class="btn btn--alt" value="Next" /></form>
  </div>
</div></div>
</body></html>
"""

FIRECRAWL_V2: dict[str, Any] = {
    "success": True,
    "data": {
        "web": [
            {
                "url": "https://docs.python.org/3/library/asyncio.html",
                "title": "asyncio — Asynchronous I/O",
                "description": "asyncio is a library to write concurrent code.",
                "position": 1,
            },
            {
                "url": "https://realpython.com/async-io-python/",
                "title": "Async IO in Python",
                "description": "A complete walkthrough.",
                "position": 2,
            },
        ],
        "images": [{"title": "logo", "imageUrl": "https://x.test/a.png", "url": "https://x.test/"}],
        "news": [],
    },
    "warning": None,
    "id": "0198ab4c-1111-2222-3333-444455556666",
    "creditsUsed": 2,
}


def search_tool(backend: str, **search: Any) -> Any:
    return make_search_tool(WebSettings(search={"backend": backend, **search}))


async def run(tool: Any, context: ToolContext, **arguments: Any) -> Any:
    return await tool(tool.parse_arguments(arguments), context)


# -- offline ------------------------------------------------------------------------


async def test_offline_results_are_deterministic(context: ToolContext) -> None:
    tool = search_tool("offline")
    first = await run(tool, context, query="rust borrow checker", max_results=3)
    again = await run(search_tool("offline"), context, query="rust  borrow checker", max_results=3)
    other = await run(tool, context, query="rust lifetimes", max_results=3)
    assert first.content == again.content
    assert first.data == again.data
    urls = [r["url"] for r in first.data["results"]]
    assert len(urls) == len(set(urls)) == 3
    assert all(u.startswith("https://offline.invalid/rust-borrow-checker/") for u in urls)
    assert {r["url"] for r in other.data["results"]}.isdisjoint(urls)
    assert "not from the web" in first.content
    assert first.content.startswith("Results for 'rust borrow checker' (backend: offline):\n1. ")


async def test_offline_corpus_is_ranked_by_matches(context: ToolContext) -> None:
    corpus = [
        {
            "title": "Gardening basics",
            "url": "http://127.0.0.1:9/garden",
            "text": "Soil and water.",
        },
        {
            "title": "Tomato care",
            "url": "http://127.0.0.1:9/tomato",
            "text": "Tomatoes need sun, water and support. Water tomatoes deeply.",
        },
        {"title": "Watering tomatoes", "url": "http://127.0.0.1:9/water", "text": "How often."},
    ]
    tool = search_tool("offline", corpus=corpus)
    result = await run(tool, context, query="watering tomato", max_results=5)
    assert [r["url"] for r in result.data["results"]] == [
        "http://127.0.0.1:9/tomato",  # "tomato" in the title: 3, first in the corpus
        "http://127.0.0.1:9/water",  # "watering" in the title: 3
    ]
    water = await run(tool, context, query="water", max_results=5)
    assert [r["url"] for r in water.data["results"]] == [
        "http://127.0.0.1:9/tomato",  # "water" twice in the text
        "http://127.0.0.1:9/garden",
    ]
    assert "Water tomatoes deeply" in water.data["results"][0]["snippet"]
    nothing = await run(tool, context, query="quantum", max_results=5)
    assert nothing.content == "No results for 'quantum' (backend: offline)."


def test_offline_is_safe_and_the_others_moderate() -> None:
    assert search_tool("offline").risk is Risk.SAFE
    for backend in ("brave", "duckduckgo", "firecrawl"):
        tool = search_tool(backend)
        assert tool.risk is Risk.MODERATE
        assert backend in tool.description
        assert tool.idempotent


# -- Brave --------------------------------------------------------------------------


async def test_brave_request_and_answer(
    wire: WireServer, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)
    wire.push(Reply.json(BRAVE_ANSWER))
    tool = search_tool("brave", base_url=wire.url)
    result = await run(tool, context, query="python asyncio", max_results=5)

    (request,) = wire.requests
    assert request.method == "GET"
    path, _, query = request.path.partition("?")
    assert path == "/res/v1/web/search"
    assert parse_qs(query) == {"q": ["python asyncio"], "count": ["5"]}
    assert request.headers["x-subscription-token"] == BRAVE_KEY
    assert request.headers["accept"] == "application/json"

    assert result.data["results"] == [
        {
            "title": "asyncio — Asynchronous I/O — Python 3.13 documentation",
            "url": "https://docs.python.org/3/library/asyncio.html",
            "snippet": "asyncio is a library to write concurrent code using the async/await syntax.",
        },
        {
            "title": "Python & asyncio: a tutorial",
            "url": "https://realpython.com/async-io-python/",
            "snippet": "A hands-on walkthrough of async IO in Python.",
        },
    ]
    assert "1. asyncio — Asynchronous I/O" in result.content
    assert "   https://realpython.com/async-io-python/" in result.content


async def test_brave_key_from_the_config(wire: WireServer, context: ToolContext) -> None:
    wire.push(Reply.json({"web": {"results": []}}))
    tool = search_tool("brave", base_url=wire.url, api_key="configured-key-0123456789")
    result = await run(tool, context, query="nothing")
    assert result.content == "No results for 'nothing' (backend: brave)."
    assert wire.requests[0].headers["x-subscription-token"] == "configured-key-0123456789"


# -- DuckDuckGo -----------------------------------------------------------------------


async def test_duckduckgo_request_and_answer(wire: WireServer, context: ToolContext) -> None:
    wire.push(Reply.raw(DDG_PAGE, content_type="text/html; charset=UTF-8"))
    tool = search_tool("duckduckgo", base_url=wire.url)
    result = await run(tool, context, query="python asyncio", max_results=5)

    (request,) = wire.requests
    assert request.method == "POST"
    assert request.path == "/html/"
    assert parse_qs(request.body.decode()) == {"q": ["python asyncio"]}
    assert request.headers["user-agent"].startswith("koboi-tools-web/")
    assert "x-subscription-token" not in request.headers and "authorization" not in request.headers

    assert result.data["results"] == [
        {
            "title": "asyncio — Asynchronous I/O — Python 3.13 documentation",
            "url": "https://docs.python.org/3/library/asyncio.html",
            "snippet": "asyncio is a library to write concurrent code using the async/await syntax.",
        },
        {
            "title": "Async IO in Python: A Complete Walkthrough",
            "url": "https://realpython.com/async-io-python/",
            "snippet": "This tutorial will give you a firm grasp of Python's approach to async IO.",
        },
    ]  # the ad is skipped


async def test_duckduckgo_respects_max_results(wire: WireServer, context: ToolContext) -> None:
    wire.push(Reply.raw(DDG_PAGE, content_type="text/html"))
    result = await run(
        search_tool("duckduckgo", base_url=wire.url), context, query="q", max_results=1
    )
    assert len(result.data["results"]) == 1


# -- Firecrawl -------------------------------------------------------------------------


async def test_firecrawl_request_and_answer(
    wire: WireServer, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRECRAWL_API_KEY", FIRECRAWL_KEY)
    wire.push(Reply.json(FIRECRAWL_V2))
    result = await run(
        search_tool("firecrawl", base_url=wire.url), context, query="python asyncio", max_results=2
    )
    (request,) = wire.requests
    assert request.method == "POST"
    assert request.path == "/v2/search"
    assert request.json() == {"query": "python asyncio", "limit": 2}
    assert request.headers["authorization"] == f"Bearer {FIRECRAWL_KEY}"
    assert [r["url"] for r in result.data["results"]] == [
        "https://docs.python.org/3/library/asyncio.html",
        "https://realpython.com/async-io-python/",
    ]
    assert result.data["results"][1]["snippet"] == "A complete walkthrough."


async def test_firecrawl_v1_answer_shape(
    wire: WireServer, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRECRAWL_API_KEY", FIRECRAWL_KEY)
    wire.push(
        Reply.json(
            {
                "success": True,
                "data": [
                    {
                        "url": "https://a.test/",
                        "title": "A",
                        "description": "first",
                        "metadata": {"title": "A (meta)", "sourceURL": "https://a.test/"},
                    },
                    {"url": "https://b.test/", "metadata": {"title": "B", "description": "meta"}},
                ],
            }
        )
    )
    result = await run(search_tool("firecrawl", base_url=wire.url), context, query="x")
    assert result.data["results"] == [
        {"title": "A", "url": "https://a.test/", "snippet": "first"},
        {"title": "B", "url": "https://b.test/", "snippet": "meta"},
    ]


# -- keys and errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "variable"), [("brave", "BRAVE_API_KEY"), ("firecrawl", "FIRECRAWL_API_KEY")]
)
async def test_missing_key_names_the_variable(
    backend: str,
    variable: str,
    wire: WireServer,
    context: ToolContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(variable, raising=False)
    tool = search_tool(backend, base_url=wire.url)
    with pytest.raises(
        ToolError, match=f"needs an API key: set the environment variable {variable}"
    ):
        await run(tool, context, query="x")
    assert wire.requests == []  # nothing was sent without a key


@pytest.mark.parametrize(
    ("backend", "variable", "key"),
    [("brave", "BRAVE_API_KEY", BRAVE_KEY), ("firecrawl", "FIRECRAWL_API_KEY", FIRECRAWL_KEY)],
)
async def test_the_key_never_appears_in_an_error(
    backend: str,
    variable: str,
    key: str,
    wire: WireServer,
    context: ToolContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(variable, key)
    # Servers that echo what they got: the key in the body, url-encoded too.
    wire.push(
        Reply.json({"error": f"invalid token {key}"}, status=401),
        Reply.raw(
            f"upstream error for key={quote(key)} / {key}", status=500, content_type="text/plain"
        ),
        Reply.raw(f"not json {key}", content_type="application/json"),
        Reply.json({"ok": True}, hang_before=5),
    )
    tool = make_search_tool(
        WebSettings(search={"backend": backend, "base_url": wire.url, "timeout": 0.5})
    )
    messages = []
    for _ in range(4):
        with pytest.raises(ToolError) as caught:
            await run(tool, context, query="x")
        messages.append(str(caught.value))
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "HTTP 401 (the API key was refused)" in messages[0]
    assert "HTTP 500" in messages[1]
    assert "not JSON" in messages[2]
    assert "timed out" in messages[3]
    for message in messages:
        assert key not in message
    assert "[redacted]" in messages[0]
    # Positive control: the key really was sent, so it really could have leaked.
    assert key in str(wire.requests[0].headers)


async def test_unreachable_backend_is_a_clear_error(context: ToolContext, listen: Any) -> None:
    port = listen("127.0.0.1").port
    dead = listen("127.0.0.2", port)
    dead.close()
    tool = search_tool("duckduckgo", base_url=f"http://127.0.0.2:{port}")
    with pytest.raises(ToolError, match=r"web_search \(duckduckgo\) failed"):
        await run(tool, context, query="x")


def test_the_backend_is_validated() -> None:
    with pytest.raises(ValueError, match="offline"):
        WebSettings(search={"backend": "google"})
    with pytest.raises(ValueError, match="takes no api_key"):
        WebSettings(search={"backend": "duckduckgo", "api_key": "k"})
    with pytest.raises(ValueError, match="http"):
        WebSettings(search={"backend": "brave", "base_url": "ftp://x"})
