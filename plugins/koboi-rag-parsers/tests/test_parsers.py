"""Each parser on a real document of its format, made here; corrupt ones fail one line
each through koboi-rag's ingestion, which goes on with the rest."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest

import koboi_rag.plugin
import koboi_rag_parsers.plugin
from koboi import PluginHost
from koboi_rag.config import RagSettings
from koboi_rag.engine import RagEngine
from koboi_rag.hookspecs import ParseError
from koboi_rag.index import SQLiteIndex
from koboi_rag_parsers.parsers import DocxParser, HtmlParser, MarkdownParser, PdfParser, TextParser


def make_pdf(pages: list[str], title: str = "Widget Manual") -> bytes:
    """A small valid PDF with one text line per page (Helvetica), offsets computed."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append(f"<< /Title ({title}) >>".encode())
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, len(objects), xref)
    )
    return out.getvalue()


def make_docx() -> bytes:
    from docx import Document

    document = Document()
    document.core_properties.title = "Support guide"
    document.add_heading("Support", level=1)
    document.add_paragraph("Call the on-call engineer for outages.")
    document.add_heading("Hours", level=2)
    document.add_paragraph("Monday to Friday.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Phone"
    table.rows[0].cells[1].text = "555-0100"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_pdf_pages_and_title() -> None:
    parsed = PdfParser().parse(
        make_pdf(["Refunds within 30 days.", "Boxes ship on Mondays."]), name="m.pdf"
    )
    assert [(s.page, s.text) for s in parsed.sections] == [
        (1, "Refunds within 30 days."),
        (2, "Boxes ship on Mondays."),
    ]
    assert parsed.title == "Widget Manual" and parsed.metadata["pages"] == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"%PDF-1.7\n1 0 obj << /Type /Catalog", "not a readable PDF"),
        (b"hello", "not a PDF file"),
    ],
)
def test_corrupt_pdfs(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        PdfParser().parse(data, name="x.pdf")


def test_docx_sections_and_tables() -> None:
    parsed = DocxParser().parse(make_docx(), name="guide.docx")
    assert parsed.title == "Support guide"
    assert [s.heading for s in parsed.sections] == ["Support", "Support > Hours"]
    assert "Phone | 555-0100" in parsed.sections[-1].text
    with pytest.raises(ParseError, match="not a readable DOCX"):
        DocxParser().parse(b"PK\x03\x04 broken", name="x.docx")


def test_markdown_html_and_text() -> None:
    markdown = MarkdownParser().parse(
        b"# Guide\n\nIntro *text*.\n\n## Install\n\nRun `setup`.\n\n```\ncode here\n```\n",
        name="g.md",
    )
    assert [(s.heading, s.text) for s in markdown.sections] == [
        ("Guide", "Guide\n\nIntro text."),
        ("Guide > Install", "Install\n\nRun setup.\n\ncode here"),
    ]
    html = HtmlParser().parse(
        b"<html><head><title>T</title><script>x()</script></head><body><nav>menu</nav>"
        b"<h1>Guide</h1><p>Hello <b>world</b>.</p><h2>More</h2><ul><li>one</li><li>two</li></ul></body></html>",
        name="p.html",
    )
    assert html.title == "T"
    assert [(s.heading, s.text) for s in html.sections] == [
        ("Guide", "Guide\n\nHello world."),
        ("Guide > More", "More\n\none\n\ntwo"),
    ]
    assert (
        TextParser().parse("Grüße aus Köln".encode("latin-1"), name="a.txt").sections[0].text
        == "Grüße aus Köln"
    )


def test_ingestion_uses_the_parsers_and_reports_corrupt_documents(tmp_path: Path) -> None:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    host.add_plugin(koboi_rag_parsers.plugin, "rag-parsers", dist="koboi-rag-parsers")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "manual.pdf").write_bytes(
        make_pdf(["Refunds are paid within 30 days.", "Shipping is free."])
    )
    (docs / "support.docx").write_bytes(make_docx())
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    (docs / "page.html").write_bytes(b"<h1>Depot</h1><p>The north depot opens at six.</p>")
    settings = RagSettings(documents=["docs"], retriever="bm25", top_k=1)
    engine = RagEngine(settings, SQLiteIndex(tmp_path / "i.db"), host=host, base_dir=tmp_path)

    async def go() -> None:
        report = await engine.ingest()
        assert report.added == 3
        assert [f["document"] for f in report.failed] == ["docs/broken.pdf"]
        assert report.failed[0]["error"].startswith("not a readable PDF")
        hit = (await engine.search("when are refunds paid")).results[0]
        assert (hit.source, hit.page) == ("docs/manual.pdf", 1)
        hit = (await engine.search("on-call engineer outages")).results[0]
        assert (hit.source, hit.heading) == ("docs/support.docx", "Support")

    anyio.run(go)
