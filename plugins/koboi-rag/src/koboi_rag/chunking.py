"""Chunkers: a parsed document cut into the pieces that are indexed and retrieved.

Every chunk keeps where it came from: its number in the document (``position``),
its character span in the document's text (``start``, ``end``), the heading of
its section, its page, and the section's metadata.

- ``fixed``: windows of ``chunk_size`` characters (or words, with ``chunk_unit:
  tokens``) overlapping by ``chunk_overlap``, cut at a space where one is near;
- ``sentence``: whole sentences packed up to ``chunk_size``;
- ``paragraph``: whole paragraphs (blank-line separated) packed up to
  ``chunk_size``; a Markdown heading starts a new chunk and names the section;
- ``semantic``: sentences grouped into topics: a chunk ends where the next
  sentences stop sharing vocabulary with the previous ones (lexical cohesion,
  the idea of TextTiling; or an embedder's vectors, given ``similarity``), within
  ``chunk_size``.

A unit (a sentence, a paragraph) longer than ``chunk_size`` is cut with ``fixed``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from koboi_rag.hookspecs import ParsedDocument, ParsedSection

SECTION_GAP = "\n\n"
_SENTENCE_END = re.compile(
    r"(?<=[.!?\u3002\uff01\uff1f])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9À-ÖØ-Þ])|\n\s*\n"
)
_PARAGRAPH = re.compile(r"\n[ \t]*\n+")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_WORD_SPAN = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    text: str
    position: int
    start: int
    end: int
    heading: str = ""
    page: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Unit:
    start: int  # offsets in the document's full text
    end: int


def document_text(document: ParsedDocument) -> str:
    """The document's text as the index keeps it: its sections joined by a blank line."""
    return SECTION_GAP.join(section.text for section in document.sections)


def _measure(unit: str) -> Callable[[str], int]:
    if unit == "tokens":
        return lambda text: len(_WORD_SPAN.findall(text))
    return len


def _fixed_spans(text: str, base: int, size: int, overlap: int, unit: str) -> list[_Unit]:
    """Windows over ``text`` (offset ``base`` in the document)."""
    if unit == "tokens":
        spans = [m.span() for m in _WORD_SPAN.finditer(text)]
        out = []
        step = max(1, size - overlap)
        for first in range(0, len(spans), step):
            window = spans[first : first + size]
            if not window:
                break
            out.append(_Unit(base + window[0][0], base + window[-1][1]))
            if first + size >= len(spans):
                break
        return out
    out = []
    begin, length = 0, len(text)
    while begin < length:
        end = min(length, begin + size)
        if end < length:
            # Prefer to cut at whitespace in the last fifth of the window.
            cut = text.rfind(" ", begin + size * 4 // 5, end)
            if cut > begin:
                end = cut
        out.append(_Unit(base + begin, base + end))
        if end >= length:
            break
        begin = max(begin + 1, end - overlap)
    return out


def _split(text: str, base: int, pattern: re.Pattern[str]) -> list[_Unit]:
    units, begin = [], 0
    for match in pattern.finditer(text):
        if match.start() > begin:
            units.append(_Unit(base + begin, base + match.start()))
        begin = match.end()
    if begin < len(text):
        units.append(_Unit(base + begin, base + len(text)))
    return units


def _strip(units: Sequence[_Unit], full: str) -> list[_Unit]:
    out = []
    for unit in units:
        piece = full[unit.start : unit.end]
        left = len(piece) - len(piece.lstrip())
        right = len(piece.rstrip())
        if right > left:
            out.append(_Unit(unit.start + left, unit.start + right))
    return out


def _pack(
    units: Sequence[_Unit],
    full: str,
    size: int,
    overlap: int,
    unit: str,
    *,
    breaks: set[int] | None = None,
) -> list[_Unit]:
    """Consecutive units joined while the chunk stays within ``size``; a unit over
    ``size`` is cut with fixed windows. ``breaks``: unit indices that must start a
    chunk."""
    measure = _measure(unit)
    chunks: list[_Unit] = []
    current: _Unit | None = None
    for index, piece in enumerate(units):
        length = measure(full[piece.start : piece.end])
        if length > size:
            if current is not None:
                chunks.append(current)
                current = None
            chunks.extend(
                _fixed_spans(full[piece.start : piece.end], piece.start, size, overlap, unit)
            )
            continue
        if current is not None:
            joined = measure(full[current.start : piece.end])
            if joined <= size and not (breaks and index in breaks):
                current = _Unit(current.start, piece.end)
                continue
            chunks.append(current)
        current = piece
    if current is not None:
        chunks.append(current)
    return chunks


def _cohesion_breaks(
    units: Sequence[_Unit],
    full: str,
    similarity: Callable[[Sequence[str]], Sequence[float]] | None,
) -> set[int]:
    """Indices of sentences that start a new topic: where the similarity between the
    two sentences before and the two after falls in the lowest quarter of the document's
    gaps (and below the document's mean)."""
    if len(units) < 4:
        return set()
    texts = [full[u.start : u.end] for u in units]
    if similarity is not None:
        gaps = list(similarity(texts))
    else:
        bags = [Counter(w.lower() for w in _WORD_SPAN.findall(t) if len(w) > 3) for t in texts]
        gaps = []
        for i in range(1, len(units)):
            left = bags[max(0, i - 2)] + bags[i - 1]
            right = bags[i] + (bags[i + 1] if i + 1 < len(bags) else Counter())
            dot = sum(v * right[k] for k, v in left.items())
            norm = math.sqrt(sum(v * v for v in left.values())) * math.sqrt(
                sum(v * v for v in right.values())
            )
            gaps.append(dot / norm if norm else 0.0)
    ordered = sorted(gaps)
    threshold = min(ordered[len(ordered) // 4], sum(gaps) / len(gaps))
    return {i + 1 for i, g in enumerate(gaps) if g <= threshold}


def chunk_document(
    document: ParsedDocument,
    *,
    chunker: str = "sentence",
    size: int = 500,
    overlap: int = 50,
    unit: str = "chars",
    similarity: Callable[[Sequence[str]], Sequence[float]] | None = None,
) -> list[Chunk]:
    """Cut ``document`` into chunks (see the module's docstring)."""
    full = document_text(document)
    chunks: list[Chunk] = []
    offset = 0
    for section in document.sections:
        base = offset
        offset += len(section.text) + len(SECTION_GAP)
        text = section.text
        if not text.strip():
            continue
        spans: list[tuple[_Unit, str]]
        if chunker == "fixed":
            spans = [(u, section.heading) for u in _fixed_spans(text, base, size, overlap, unit)]
        elif chunker == "paragraph":
            spans = _paragraph_spans(section, base, full, size, overlap, unit)
        else:
            sentences = _strip(_split(text, base, _SENTENCE_END), full)
            breaks = (
                _cohesion_breaks(sentences, full, similarity) if chunker == "semantic" else None
            )
            spans = [
                (u, section.heading)
                for u in _pack(sentences, full, size, overlap, unit, breaks=breaks)
            ]
        for span, heading in spans:
            piece = full[span.start : span.end]
            if not piece.strip():
                continue
            chunks.append(
                Chunk(
                    text=piece,
                    position=len(chunks),
                    start=span.start,
                    end=span.end,
                    heading=heading,
                    page=section.page,
                    metadata=dict(section.metadata),
                )
            )
    return chunks


def _paragraph_spans(
    section: ParsedSection, base: int, full: str, size: int, overlap: int, unit: str
) -> list[tuple[_Unit, str]]:
    paragraphs = _strip(_split(section.text, base, _PARAGRAPH), full)
    # A Markdown heading line starts a new group and names it.
    groups: list[tuple[str, list[_Unit]]] = [(section.heading, [])]
    trail: list[tuple[int, str]] = []
    for paragraph in paragraphs:
        first_line = full[paragraph.start : paragraph.end].split("\n", 1)[0]
        match = _HEADING.match(first_line)
        if match:
            level, title = len(match.group(1)), match.group(2)
            trail = [(lvl, t) for lvl, t in trail if lvl < level] + [(level, title)]
            heading = " > ".join(t for _, t in trail)
            if section.heading:
                heading = f"{section.heading} > {heading}"
            groups.append((heading, []))
        groups[-1][1].append(paragraph)
    out: list[tuple[_Unit, str]] = []
    for heading, members in groups:
        out.extend((u, heading) for u in _pack(members, full, size, overlap, unit))
    return out
