"""HTML to readable text, on the standard library's tolerant tokenizer (:mod:`html.parser`).

``html.parser`` does the hard part — malformed markup, character references,
``<script>``/``<style>`` bodies read as raw text — and is maintained with
CPython, so it adds no dependency. This module only decides what a reader
sees: the title, headings marked with ``#``, paragraphs and list items on
their own lines, table cells separated by ``|``, ``<pre>`` kept as is, and
links written as ``text [url]`` with the URL made absolute. Scripts, styles,
templates, SVG and other invisible parts are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin

# Content that is never text for a reader.
_DROP = frozenset(
    {"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas", "select"}
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements that start and end a block of text.
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details",
        "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
        "header", "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol", "p", "section",
        "summary", "table", "tbody", "thead", "tfoot", "tr", "ul",
    }
)  # fmt: skip
# Blocks set off from their neighbours by a blank line.
_PARAGRAPHS = frozenset(
    {
        "article", "aside", "blockquote", "dl", "figure", "footer", "form", "header", "hr",
        "main", "nav", "ol", "p", "pre", "section", "table", "ul",
    }
)  # fmt: skip
_SPACE = re.compile(r"[ \t\r\n\f\v\u00a0]+")
_IGNORED_LINK = re.compile(r"^\s*(?:javascript|data|vbscript|mailto|tel):", re.IGNORECASE)


@dataclass
class PageText:
    """What :func:`html_to_text` found: the title and the readable text."""

    title: str
    text: str


def html_to_text(html: str, base_url: str = "") -> PageText:
    """Readable text of an HTML document; links are made absolute against ``base_url``."""
    parser = _TextParser(base_url)
    parser.feed(html)
    parser.close()
    return PageText(title=_collapse(" ".join(parser.title_parts)), text=parser.result())


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


class _TextParser(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.title_parts: list[str] = []
        self._lines: list[str] = []
        self._inline: list[str] = []  # text of the block being built
        self._prefix = ""  # "# " for a heading, "- " for a list item...
        self._drop_depth = 0
        self._dropping: list[str] = []
        self._in_title = False
        self._pre_depth = 0
        self._links: list[tuple[str | None, int]] = []  # (href, length of _inline at <a>)
        self._list_depth = 0
        self._quote_depth = 0
        self._cells_in_row = 0

    # -- the tokenizer's callbacks ------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._drop_depth:
            if tag == self._dropping[-1]:
                self._drop_depth += 1
            return
        if tag in _DROP:
            self._drop_depth = 1
            self._dropping.append(tag)
            return
        attr = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "base" and attr.get("href"):
            self.base_url = urljoin(self.base_url, attr["href"] or "")
        elif tag in _HEADINGS:
            self._paragraph()
            self._prefix = "#" * _HEADINGS[tag] + " "
        elif tag == "li":
            self._flush()
            self._prefix = "  " * max(self._list_depth - 1, 0) + "- "
        elif tag in ("ul", "ol"):
            # A nested list continues its item; a top-level one is a paragraph.
            self._end_list_block()
            self._list_depth += 1
        elif tag == "blockquote":
            self._paragraph()
            self._quote_depth += 1
        elif tag == "pre":
            self._paragraph()
            self._pre_depth += 1
        elif tag == "br":
            self._flush(keep_empty=self._pre_depth > 0)
        elif tag in ("td", "th"):
            if self._cells_in_row:
                self._inline.append(" | ")
            self._cells_in_row += 1
        elif tag == "tr":
            self._flush()
            self._cells_in_row = 0
        elif tag == "a":
            self._links.append((attr.get("href"), len(self._inline)))
        elif tag == "img":
            alt = _collapse(attr.get("alt") or "")
            if alt:
                self._inline.append(f" {alt} ")
        elif tag in _PARAGRAPHS:
            self._paragraph()
        elif tag in _BLOCKS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self._drop_depth:
            if tag == self._dropping[-1]:
                self._drop_depth -= 1
                if not self._drop_depth:
                    self._dropping.pop()
            return
        if tag == "title":
            self._in_title = False
        elif tag in _HEADINGS:
            self._paragraph()
        elif tag == "li":
            self._flush()
        elif tag in ("ul", "ol"):
            self._list_depth = max(self._list_depth - 1, 0)
            self._end_list_block()
        elif tag == "blockquote":
            self._paragraph()
            self._quote_depth = max(self._quote_depth - 1, 0)
        elif tag == "pre":
            self._flush(preformatted=True)
            self._lines.append("")
            self._pre_depth = max(self._pre_depth - 1, 0)
        elif tag == "a" and self._links:
            self._end_link()
        elif tag in _PARAGRAPHS:
            self._paragraph()
        elif tag in _BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._drop_depth:
            return
        if self._in_title:
            self.title_parts.append(data)
            return
        self._inline.append(data)

    # -- building lines --------------------------------------------------------

    def _end_link(self) -> None:
        href, start = self._links.pop()
        if not href or href.startswith("#") or _IGNORED_LINK.match(href):
            return
        url = urljoin(self.base_url, href.strip())
        label = _collapse("".join(self._inline[start:]))
        if label != url:
            self._inline.append(f" [{url}]" if label else f"[{url}]")

    def _flush(self, *, keep_empty: bool = False, preformatted: bool = False) -> None:
        raw = "".join(self._inline)
        self._inline.clear()
        self._links = [(href, 0) for href, _ in self._links]  # open links span the break
        if preformatted or self._pre_depth:
            lines = raw.strip("\n").split("\n") if raw.strip() else []
        else:
            text = _collapse(raw)
            lines = [text] if text else ([""] if keep_empty else [])
        quote = "> " * self._quote_depth
        for index, line in enumerate(lines):
            prefix = self._prefix if index == 0 else " " * len(self._prefix)
            self._lines.append(f"{quote}{prefix}{line}".rstrip())
        if lines or not keep_empty:
            self._prefix = ""

    def _end_list_block(self) -> None:
        if self._list_depth:
            self._flush()
        else:
            self._paragraph()

    def _paragraph(self) -> None:
        self._flush()
        self._lines.append("")

    def result(self) -> str:
        self._flush()
        # Blocks are separated by one blank line; runs of blank lines collapse.
        out: list[str] = []
        for line in self._lines:
            if line.strip() or (out and out[-1].strip()):
                out.append(line)
        return "\n".join(out).strip("\n")
