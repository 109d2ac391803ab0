"""koboi hooks of koboi-rag-parsers (plugin id ``rag-parsers``): it implements koboi-rag's
hook ``koboi_rag_register_parsers``. Without koboi-rag the hook waits, harmlessly.
The parser libraries are imported when a document is parsed."""

from __future__ import annotations

from typing import Any

from koboi.hookspecs import hookimpl

#: Above koboi-rag's own plain-text parser (0).
PRIORITY = 10


@hookimpl
def koboi_rag_register_parsers(register: Any) -> None:
    from koboi_rag_parsers import parsers

    register(
        "text",
        parsers.TextParser(),
        suffixes=(".txt", ".text", ".log", ".csv", ".rst"),
        media_types=("text/plain", "text/csv", "text/*"),
        priority=PRIORITY,
        description="Plain text in any encoding (charset-normalizer).",
    )
    register(
        "markdown",
        parsers.MarkdownParser(),
        suffixes=(".md", ".markdown", ".mdown"),
        media_types=("text/markdown", "text/x-markdown"),
        priority=PRIORITY,
        description="Markdown (markdown-it-py): sections by heading, markup removed.",
    )
    register(
        "html",
        parsers.HtmlParser(),
        suffixes=(".html", ".htm", ".xhtml"),
        media_types=("text/html", "application/xhtml+xml"),
        priority=PRIORITY,
        description="HTML (Beautiful Soup): readable text by heading, scripts and menus dropped.",
    )
    register(
        "pdf",
        parsers.PdfParser(),
        suffixes=(".pdf",),
        media_types=("application/pdf",),
        priority=PRIORITY,
        description="PDF (pypdf): the text of each page, with its page number.",
    )
    register(
        "docx",
        parsers.DocxParser(),
        suffixes=(".docx",),
        media_types=("application/vnd.openxmlformats-officedocument.wordprocessingml.document",),
        priority=PRIORITY,
        description="Word DOCX (python-docx): sections by heading style, tables as rows.",
    )
