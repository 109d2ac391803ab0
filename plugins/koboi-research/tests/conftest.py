"""Fixtures of koboi-research's tests: a corpus of pages served on 127.0.0.1.

Nothing leaves the machine: the pages are served by a real HTTP server on
loopback (koboi-testing's WireServer), the offline search backend of
koboi-tools-web lists them, and web_fetch may reach 127.0.0.1 because the
config allows that one address (``tools_web.allow_networks``), as an
operator would allow an intranet host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from koboi.plugins import reset_default_host
from koboi_testing.wire import Received, Reply, WireServer

PAGES: dict[str, tuple[str, str]] = {
    "/tides.html": (
        "What causes tides",
        "<h1>Why the sea rises</h1>"
        "<p>Tides are caused mainly by the gravity of the Moon pulling on the oceans. "
        "The Sun causes tides too, but its pull on the tides is a little under half of the "
        "Moon's.</p><p>Coastal towns print tables of high water.</p>",
    ),
    "/spring.html": (
        "Spring tides explained",
        "<h1>Spring tides</h1>"
        "<p>Spring tides happen at new moon and full moon, when the Sun, the Moon and the "
        "Earth line up. Spring tides have the largest range of the month.</p>",
    ),
    "/neap-old.html": (
        "Neap tides",
        "<p>This page has moved to our new site. Please update your bookmarks.</p>",
    ),
    "/quarter.html": (
        "Quarter moons and weak tides",
        "<p>At the first and last quarter moon the Sun and the Moon pull at right angles. "
        "These weak neap tides have the smallest range of the month.</p>",
    ),
    "/cooking.html": ("Cooking with sea salt", "<p>Salt brings out the taste of fish.</p>"),
}


#: What the offline search backend matches queries against (it ranks by word counts).
SEARCH_TEXT = {
    "/tides.html": "what causes tides moon gravity",
    "/spring.html": "spring tides spring tides new moon full moon",
    "/neap-old.html": "neap tides neap tides",
    "/quarter.html": "quarter moon weak tides range",
    "/cooking.html": "sea salt fish",
}


@dataclass
class Corpus:
    """The pages, served; ``fetched`` counts the requests of each path."""

    server: WireServer
    fetched: dict[str, int] = field(default_factory=dict)
    #: Each path's title and HTML body.
    pages: dict[str, tuple[str, str]] = field(default_factory=lambda: dict(PAGES))

    @property
    def url(self) -> str:
        return self.server.url

    def documents(self, **extra: str) -> list[dict[str, str]]:
        """The offline search backend's corpus: each page's title, URL and the words it
        is found by; ``extra`` adds documents (title -> URL) whose text is their title."""
        found = [
            {"title": title, "url": self.url + path, "text": SEARCH_TEXT[path]}
            for path, (title, _) in PAGES.items()
        ]
        return found + [{"title": t, "url": u, "text": t} for t, u in extra.items()]


@pytest.fixture
def corpus() -> Iterator[Corpus]:
    with WireServer() as server:
        made = Corpus(server)

        def serve(request: Received) -> Reply:
            path = request.path.split("?")[0]
            made.fetched[path] = made.fetched.get(path, 0) + 1
            page = PAGES.get(path)
            if page is None:
                return Reply.raw("not here", status=404, content_type="text/plain")
            title, body = page
            html = f"<html><head><title>{title}</title></head><body>{body}</body></html>"
            return Reply.raw(html, content_type="text/html; charset=utf-8")

        server.handler = serve
        yield made


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KOBOI_STORE", "memory://")
    reset_default_host()
    yield
    reset_default_host()
