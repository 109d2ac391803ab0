"""Parsers: koboi-rag's own plain-text parser, every plugin's, and the choice between them.

A document goes to the parser the config names for its suffix or media type
(``rag.parsers``), else to the parser with the highest priority among those that
claim its suffix or media type. koboi-rag's own ``plain`` parser (priority 0)
reads UTF-8 text; koboi-rag-parsers adds Markdown, HTML, PDF, DOCX and text in
other encodings.
"""

from __future__ import annotations

import inspect
import mimetypes
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from koboi_rag.hookspecs import REGISTER_PARSERS, ParsedDocument, ParsedSection, ParseError

if TYPE_CHECKING:
    from koboi.plugins import PluginHost
    from koboi.registry import Registration

#: What koboi-rag-parsers adds, for the "no parser" message.
PARSERS_HINT = "koboi-rag-parsers reads Markdown, HTML, PDF, DOCX and text in any encoding"


def looks_binary(data: bytes) -> bool:
    """NUL bytes in the first 8 KiB: no text format has them."""
    return b"\x00" in data[:8192]


class PlainTextParser:
    """UTF-8 text (a byte-order mark is dropped), as one section."""

    def parse(self, data: bytes, *, name: str, media_type: str = "") -> ParsedDocument:
        if looks_binary(data):
            raise ParseError("binary content (NUL bytes), not text; add a parser for this format")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ParseError(f"not UTF-8 text (byte {exc.start}); {PARSERS_HINT}") from None
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        return ParsedDocument(sections=[ParsedSection(text=text)], title=PurePosixPath(name).name)


PLAIN_SUFFIXES = (
    ".txt",
    ".text",
    ".md",
    ".markdown",
    ".rst",
    ".csv",
    ".log",
    ".json",
    ".yaml",
    ".yml",
)
PLAIN_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json")


def suffix_of(key: str) -> str:
    name = key.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return PurePosixPath(name).suffix.lower()


class Parsers:
    """The installed parsers and the config's choices."""

    def __init__(self, host: PluginHost, overrides: Mapping[str, str]) -> None:
        self.registry = host.collect(REGISTER_PARSERS, kind="parser")
        self.overrides = {k.lower(): v for k, v in overrides.items()}
        for wanted in self.overrides.values():
            if self.registry.get(wanted) is None:
                from koboi.errors import KoboiError

                raise KoboiError(
                    f"rag.parsers names the parser {wanted!r}, which no installed plugin "
                    f"provides (installed: {', '.join(sorted(self.registry.names()))})"
                )

    def choose(self, key: str, media_type: str) -> Registration[Any] | None:
        suffix = suffix_of(key)
        media = media_type.split(";")[0].strip().lower()
        if not media:
            media = (mimetypes.guess_type(key)[0] or "").lower()
        for wanted in (suffix, media):
            name = self.overrides.get(wanted) if wanted else None
            if name:
                return self.registry.get(name)
        claims = []
        for entry in self.registry:
            suffixes = tuple(s.lower() for s in entry.extra.get("suffixes", ()))
            types = tuple(t.lower() for t in entry.extra.get("media_types", ()))
            claimed = (suffix and suffix in suffixes) or (
                media and (media in types or f"{media.split('/')[0]}/*" in types)
            )
            if claimed:
                claims.append(entry)
        if not claims:
            return None
        return max(claims, key=lambda e: (int(e.extra.get("priority", 0)), e.name))

    def names(self) -> list[str]:
        return sorted(self.registry.names())


async def parse_with(
    entry: Registration[Any], data: bytes, key: str, media_type: str
) -> ParsedDocument:
    """Run a parser (sync ones in a worker thread); :class:`ParseError` for any failure."""
    import anyio.to_thread

    parser = entry.target
    try:
        if inspect.iscoroutinefunction(parser.parse):
            parsed = await parser.parse(data, name=key, media_type=media_type)
        else:
            parsed = await anyio.to_thread.run_sync(
                lambda: parser.parse(data, name=key, media_type=media_type)
            )
    except ParseError:
        raise
    except Exception as exc:  # a parser library's own error: one line for the document
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ParseError(f"the {entry.name} parser failed: {detail[:200]}") from None
    if not isinstance(parsed, ParsedDocument):
        raise ParseError(
            f"the {entry.name} parser returned {type(parsed).__name__}, not a ParsedDocument"
        )
    return parsed
