"""``web_search``'s backends: offline (deterministic), Brave, DuckDuckGo (HTML), Firecrawl.

A backend turns a query into :class:`SearchHit` items. The networked ones
talk to one fixed API root each (``search.base_url`` or the public one): those
URLs come from the operator, not from the model, so they do not go through
``web_fetch``'s SSRF guard. API keys come from the config or the environment
and are cut out of every error text (a server may echo what it received).
"""

from __future__ import annotations

import hashlib
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from koboi.errors import ToolError
from koboi_http.hooks import SEARCH
from koboi_http.outbound import client
from koboi_tools_web.config import KEY_VARIABLES, SearchSettings

_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_BODY_PREVIEW = 300


@dataclass(frozen=True)
class SearchHit:
    """One search result."""

    title: str
    url: str
    snippet: str

    def as_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


def render_hits(query: str, backend: str, hits: list[SearchHit]) -> str:
    """The text the model reads."""
    if not hits:
        return f"No results for {query!r} (backend: {backend})."
    lines = [f"Results for {query!r} (backend: {backend}):"]
    for number, hit in enumerate(hits, 1):
        lines.append(f"{number}. {hit.title or hit.url}")
        lines.append(f"   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


class SearchBackend(ABC):
    """Answers queries; ``sends_queries_out`` says whether the query leaves the machine."""

    name: str
    sends_queries_out: bool = True

    def __init__(self, settings: SearchSettings, user_agent: str) -> None:
        self.settings = settings
        self.user_agent = user_agent

    @abstractmethod
    async def search(self, query: str, max_results: int) -> list[SearchHit]:
        """Up to ``max_results`` hits for ``query``; ``ToolError`` says what went wrong."""


def make_backend(settings: SearchSettings, user_agent: str) -> SearchBackend:
    """The backend ``settings.backend`` names."""
    backends: dict[str, type[SearchBackend]] = {
        "offline": OfflineBackend,
        "brave": BraveBackend,
        "duckduckgo": DuckDuckGoBackend,
        "firecrawl": FirecrawlBackend,
    }
    return backends[settings.backend](settings, user_agent)


# -- offline -----------------------------------------------------------------


class OfflineBackend(SearchBackend):
    """Deterministic and local: the configured corpus, else results derived from the query.

    With a corpus, documents are ranked by how often the query's words occur
    (a title match weighs three times a body match; ties keep corpus order),
    so evals can plant the page an agent should find. Without one, each
    query yields the same made-up results every time, on ``.invalid`` URLs
    (RFC 2606: they never resolve, so nothing is ever fetched from them).
    """

    name = "offline"
    sends_queries_out = False

    async def search(self, query: str, max_results: int) -> list[SearchHit]:
        if self.settings.corpus:
            return self._from_corpus(query, max_results)
        return self._derived(query, max_results)

    def _from_corpus(self, query: str, max_results: int) -> list[SearchHit]:
        terms = sorted({w.casefold() for w in _WORD.findall(query)})
        scored: list[tuple[int, int, SearchHit]] = []
        for index, doc in enumerate(self.settings.corpus):
            title_words = [w.casefold() for w in _WORD.findall(doc.title)]
            text_words = [w.casefold() for w in _WORD.findall(doc.text)]
            score = sum(3 * title_words.count(t) + text_words.count(t) for t in terms)
            if score:
                hit = SearchHit(doc.title, doc.url, _snippet(doc.text, terms))
                scored.append((-score, index, hit))
        scored.sort(key=lambda item: (item[0], item[1]))
        return [hit for _, _, hit in scored[:max_results]]

    def _derived(self, query: str, max_results: int) -> list[SearchHit]:
        words = [w.casefold() for w in _WORD.findall(query)]
        slug = "-".join(words)[:60] or "query"
        hits = []
        for number in range(1, max_results + 1):
            digest = hashlib.sha256(f"{query}\x00{number}".encode()).hexdigest()[:12]
            hits.append(
                SearchHit(
                    title=f"{query} - offline result {number}",
                    url=f"https://offline.invalid/{slug}/{number}-{digest}",
                    snippet=(
                        f"Deterministic offline result {number} for {query!r} (id {digest}); "
                        "not from the web."
                    ),
                )
            )
        return hits


def _snippet(text: str, terms: list[str]) -> str:
    flat = _SPACE.sub(" ", text).strip()
    lowered = flat.casefold()
    positions = [p for p in (lowered.find(t) for t in terms) if p >= 0]
    start = max(min(positions, default=0) - 60, 0)
    piece = flat[start : start + 200]
    return ("..." if start else "") + piece + ("..." if start + 200 < len(flat) else "")


# -- the networked backends ----------------------------------------------------


class _HTTPBackend(SearchBackend):
    path: str
    key_variable: str | None = None

    def api_key(self) -> str | None:
        """The key from the config, else the environment; a clear error without one."""
        if self.key_variable is None:
            return None
        configured = self.settings.api_key
        value = configured.get_secret_value().strip() if configured is not None else ""
        if not value:
            value = os.environ.get(self.key_variable, "").strip()
        if not value:
            raise ToolError(
                f"web_search backend {self.name!r} needs an API key: set the environment "
                f"variable {self.key_variable} (or tools_web.search.api_key)"
            )
        return value

    async def search(self, query: str, max_results: int) -> list[SearchHit]:
        key = self.api_key()
        try:
            return await self._search(query, max_results, key)
        except ToolError as exc:
            raise ToolError(_redact(str(exc), key)) from None
        except httpx.TimeoutException:
            raise ToolError(
                f"web_search ({self.name}) timed out after {self.settings.timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            message = f"web_search ({self.name}) failed: {exc or type(exc).__name__}"
            raise ToolError(_redact(message, key)) from None

    @abstractmethod
    async def _search(self, query: str, max_results: int, key: str | None) -> list[SearchHit]: ...

    def _client(self) -> httpx.AsyncClient:
        # Through koboi-http's factory: the plugins' request hooks run (peer "search").
        return client(
            peer=SEARCH,
            base_url=self.settings.endpoint_root(),
            timeout=self.settings.timeout,
            headers={"User-Agent": self.user_agent},
            follow_redirects=False,
        )

    def _check(self, response: httpx.Response) -> None:
        if response.status_code == 200:
            return
        body = _SPACE.sub(" ", response.text)[:_BODY_PREVIEW]
        hint = {
            401: "the API key was refused",
            403: "the API key was refused",
            429: "rate limited, try again later",
        }.get(response.status_code, "")
        raise ToolError(
            f"web_search ({self.name}) failed: HTTP {response.status_code}"
            + (f" ({hint})" if hint else "")
            + (f": {body}" if body else "")
        )

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ToolError(f"web_search ({self.name}): the answer is not JSON") from None


class BraveBackend(_HTTPBackend):
    """Brave Search API: ``GET /res/v1/web/search?q=&count=`` with ``X-Subscription-Token``."""

    name = "brave"
    path = "/res/v1/web/search"
    key_variable = KEY_VARIABLES["brave"]

    async def _search(self, query: str, max_results: int, key: str | None) -> list[SearchHit]:
        async with self._client() as client:
            response = await client.get(
                self.path,
                params={"q": query, "count": min(max_results, 20)},
                headers={"Accept": "application/json", "X-Subscription-Token": key or ""},
            )
            self._check(response)
            data = self._json(response)
        results = (data.get("web") or {}).get("results") or [] if isinstance(data, dict) else []
        hits = []
        for item in results:
            if isinstance(item, dict) and item.get("url"):
                hits.append(
                    SearchHit(
                        title=_plain(item.get("title", "")),
                        url=str(item["url"]),
                        snippet=_plain(item.get("description", "")),
                    )
                )
        return hits[:max_results]


class FirecrawlBackend(_HTTPBackend):
    """Firecrawl: ``POST /v2/search {"query", "limit"}`` with a bearer key."""

    name = "firecrawl"
    path = "/v2/search"
    key_variable = KEY_VARIABLES["firecrawl"]

    async def _search(self, query: str, max_results: int, key: str | None) -> list[SearchHit]:
        async with self._client() as client:
            response = await client.post(
                self.path,
                json={"query": query, "limit": max_results},
                headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            )
            self._check(response)
            data = self._json(response)
        if not isinstance(data, dict) or data.get("success") is False:
            error = data.get("error") if isinstance(data, dict) else None
            raise ToolError(f"web_search (firecrawl) failed: {error or 'unexpected answer'}")
        found = data.get("data")
        # v2 answers {"data": {"web": [...]}}; v1 answered {"data": [...]}.
        items = found.get("web") or [] if isinstance(found, dict) else found or []
        hits = []
        for item in items:
            if isinstance(item, dict) and item.get("url"):
                metadata = item.get("metadata") or {}
                hits.append(
                    SearchHit(
                        title=_plain(item.get("title") or metadata.get("title") or ""),
                        url=str(item["url"]),
                        snippet=_plain(
                            item.get("description") or metadata.get("description") or ""
                        ),
                    )
                )
        return hits[:max_results]


class DuckDuckGoBackend(_HTTPBackend):
    """DuckDuckGo's HTML endpoint (``POST /html/``, form field ``q``); no key, ads skipped."""

    name = "duckduckgo"
    path = "/html/"

    async def _search(self, query: str, max_results: int, key: str | None) -> list[SearchHit]:
        async with self._client() as client:
            response = await client.post(
                self.path, data={"q": query, "b": ""}, headers={"Accept": "text/html"}
            )
            self._check(response)
        parser = _DuckDuckGoParser(str(response.url))
        parser.feed(response.text)
        parser.close()
        return parser.hits[:max_results]


class _DuckDuckGoParser(HTMLParser):
    """Reads ``div.result`` blocks: ``a.result__a`` (title, link) and ``.result__snippet``."""

    def __init__(self, page_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page_url = page_url
        self.hits: list[SearchHit] = []
        self._depth = 0
        self._result_depth: int | None = None  # depth of the open div.result
        self._is_ad = False
        self._field: str | None = None  # "title" or "snippet" while inside one
        self._field_depth = 0
        self._title: list[str] = []
        self._snippet: list[str] = []
        self._href = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        self._depth += 1
        attr = dict(attrs)
        classes = set((attr.get("class") or "").split())
        if tag == "div" and "result" in classes and self._result_depth is None:
            self._start_result(classes)
            return
        if self._result_depth is None or self._field is not None:
            return
        if "result__a" in classes:
            self._field, self._field_depth = "title", self._depth
            self._href = attr.get("href") or ""
        elif "result__snippet" in classes:
            self._field, self._field_depth = "snippet", self._depth

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        if self._field is not None and self._depth == self._field_depth:
            self._field = None
        if self._result_depth is not None and self._depth == self._result_depth:
            self._end_result()
        self._depth = max(self._depth - 1, 0)

    def handle_data(self, data: str) -> None:
        if self._field == "title":
            self._title.append(data)
        elif self._field == "snippet":
            self._snippet.append(data)

    def _start_result(self, classes: set[str]) -> None:
        self._result_depth = self._depth
        self._is_ad = "result--ad" in classes
        self._title, self._snippet, self._href = [], [], ""

    def _end_result(self) -> None:
        self._result_depth = None
        url = _ddg_target(urljoin(self.page_url, self._href)) if self._href else ""
        if url and not self._is_ad:
            self.hits.append(
                SearchHit(_plain("".join(self._title)), url, _plain("".join(self._snippet)))
            )


_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"})
_VOID |= {"source", "track", "wbr"}


def _ddg_target(href: str) -> str:
    """The real URL behind DuckDuckGo's ``/l/?uddg=<url>`` redirect (or ``href`` itself)."""
    parts = urlsplit(href)
    if parts.path.startswith("/l/"):
        target = parse_qs(parts.query).get("uddg")
        if target:
            return target[0]
    if parts.path.startswith("/y.js"):  # an ad's click URL
        return ""
    return href


def _plain(text: Any) -> str:
    """Text without the markup some APIs put in titles and snippets (``<strong>``)."""
    return _SPACE.sub(" ", unescape(_TAG.sub("", str(text)))).strip()


def _redact(text: str, key: str | None) -> str:
    if not key:
        return text
    return text.replace(key, "[redacted]")
