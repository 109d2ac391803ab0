"""The parsers. Each turns a document's bytes into sections of text with what a chunk
should carry (the heading path, the page), or raises ``ParseError`` with one line
saying why it cannot (a corrupt or encrypted PDF, a DOCX that is not a zip)."""

from __future__ import annotations

import io
import re
from pathlib import PurePosixPath
from typing import Any

from koboi_rag.hookspecs import ParsedDocument, ParsedSection, ParseError

_BLANKS = re.compile(r"\n{3,}")


def _tidy(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _name(name: str) -> str:
    return PurePosixPath(name.split("?", 1)[0]).name


def _binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


class TextParser:
    """Text in any encoding: UTF-8 first, else what charset-normalizer finds."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        return ParsedDocument(sections=[ParsedSection(text=decode_text(data))], title=_name(name))


def decode_text(data: bytes) -> str:
    if _binary(data):
        raise ParseError("binary content (NUL bytes), not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        from charset_normalizer import from_bytes

        best = from_bytes(data).best()
        if best is None:
            raise ParseError("not text in any encoding charset-normalizer knows") from None
        text = str(best)
    return text.replace("\r\n", "\n").replace("\r", "\n")


class MarkdownParser:
    """Markdown: a section per heading (its path, ``A > B``), markup removed."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        from markdown_it import MarkdownIt

        text = decode_text(data)
        tokens = MarkdownIt("commonmark").enable("table").parse(text)
        sections: list[ParsedSection] = []
        trail: list[tuple[int, str]] = []
        current: list[str] = []
        title = ""

        def close() -> None:
            body = _tidy("\n\n".join(current))
            if body:
                sections.append(ParsedSection(text=body, heading=" > ".join(t for _, t in trail)))
            current.clear()

        heading_level = 0
        for token in tokens:
            if token.type == "heading_open":
                close()
                heading_level = int(token.tag[1])
            elif token.type == "inline":
                plain = (
                    "".join(
                        child.content
                        for child in token.children or ()
                        if child.type in ("text", "code_inline")
                    )
                    or token.content
                )
                if heading_level:
                    trail = [(lvl, t) for lvl, t in trail if lvl < heading_level] + [
                        (heading_level, plain)
                    ]
                    title = title or plain
                    current.append(plain)
                    heading_level = 0
                else:
                    current.append(plain)
            elif token.type in ("fence", "code_block"):
                current.append(token.content)
        close()
        return ParsedDocument(sections=sections, title=title or _name(name))


_SKIP = {"script", "style", "noscript", "nav", "header", "footer", "template", "svg", "form"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {
    "p",
    "div",
    "li",
    "tr",
    "br",
    "pre",
    "blockquote",
    "section",
    "article",
    "table",
    "ul",
    "ol",
    "dd",
    "dt",
}


class HtmlParser:
    """HTML: the readable text, a section per heading; scripts, styles and menus dropped."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        from bs4 import BeautifulSoup
        from bs4.element import NavigableString, Tag

        if _binary(data):
            raise ParseError("binary content (NUL bytes), not HTML")
        soup = BeautifulSoup(data, "html.parser")
        title = soup.title.get_text(" ", strip=True) if soup.title else ""
        for tag in soup.find_all(list(_SKIP | {"title", "head"})):
            tag.decompose()
        sections: list[ParsedSection] = []
        trail: list[tuple[int, str]] = []
        parts: list[str] = []

        def close() -> None:
            body = _tidy("".join(parts))
            if body:
                sections.append(ParsedSection(text=body, heading=" > ".join(t for _, t in trail)))
            parts.clear()

        def walk(node: Any) -> None:
            nonlocal trail
            for child in node.children:
                if isinstance(child, NavigableString):
                    if type(child) is NavigableString:  # not a comment or a doctype
                        parts.append(str(child))
                elif isinstance(child, Tag):
                    if child.name in _HEADINGS:
                        close()
                        level = int(child.name[1])
                        text = child.get_text(" ", strip=True)
                        trail = [(lvl, t) for lvl, t in trail if lvl < level] + [(level, text)]
                        parts.append(text + "\n\n")
                        continue
                    if child.name in _BLOCKS:
                        parts.append("\n")
                    walk(child)
                    if child.name in _BLOCKS:
                        parts.append("\n")

        walk(soup)
        close()
        return ParsedDocument(
            sections=sections, title=title or (trail[0][1] if trail else _name(name))
        )


class PdfParser:
    """PDF: a section per page with its number; metadata title."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        if not data.lstrip()[:5].startswith(b"%PDF"):
            raise ParseError("not a PDF file (no %PDF header)")
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                raise ParseError("the PDF is encrypted; decrypt it to index it")
            sections = []
            for number, page in enumerate(reader.pages, start=1):
                text = _tidy(page.extract_text() or "")
                if text:
                    sections.append(ParsedSection(text=text, page=number))
            metadata = reader.metadata
            title = str(metadata.title) if metadata is not None and metadata.title else ""
        except ParseError:
            raise
        except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            raise ParseError(
                f"not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})"
            ) from None
        if not sections:
            raise ParseError("the PDF has no extractable text (a scan? OCR it first)")
        return ParsedDocument(
            sections=sections, title=title or _name(name), metadata={"pages": len(reader.pages)}
        )


class DocxParser:
    """Word DOCX: a section per heading style (``Heading N``), tables as rows."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        import zipfile

        from docx import Document
        from docx.opc.exceptions import PackageNotFoundError

        try:
            document = Document(io.BytesIO(data))
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise ParseError(f"not a readable DOCX ({type(exc).__name__})") from None
        sections: list[ParsedSection] = []
        trail: list[tuple[int, str]] = []
        parts: list[str] = []

        def close() -> None:
            body = _tidy("\n\n".join(parts))
            if body:
                sections.append(ParsedSection(text=body, heading=" > ".join(t for _, t in trail)))
            parts.clear()

        for paragraph in document.paragraphs:
            style = paragraph.style.name if paragraph.style is not None else ""
            match = re.match(r"Heading (\d)", style or "")
            if match or style == "Title":
                close()
                level = int(match.group(1)) if match else 0
                trail = [(lvl, t) for lvl, t in trail if lvl < level] + [
                    (level, paragraph.text.strip())
                ]
            parts.append(paragraph.text)
        for table in document.tables:
            for row in table.rows:
                parts.append(" | ".join(cell.text.strip() for cell in row.cells))
        close()
        title = document.core_properties.title or (trail[0][1] if trail else _name(name))
        return ParsedDocument(sections=sections, title=title)
