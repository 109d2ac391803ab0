"""HTML to text on its own: structure kept, invisible parts dropped, links absolute."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from koboi_tools_web.html_text import html_to_text


def text(html: str, base: str = "https://site.test/dir/page.html") -> str:
    return html_to_text(html, base).text


def test_title_is_separate_from_the_text() -> None:
    page = html_to_text("<html><head><title> A  &amp; B </title></head><body>x</body></html>")
    assert page.title == "A & B"
    assert page.text == "x"


def test_scripts_styles_and_hidden_machinery_are_dropped() -> None:
    html = (
        "<p>keep</p><script>if (a < b) { alert('</p>') }</script><style>p{}</style>"
        "<template><p>tpl</p></template><svg><svg><text>inner</text></svg><text>x</text></svg>"
        "<noscript>nojs</noscript><select><option>opt</option></select><p>also kept</p>"
    )
    assert text(html) == "keep\n\nalso kept"


def test_links_are_absolute_and_written_after_their_text() -> None:
    html = (
        '<base href="https://docs.test/v2/">'
        '<p><a href="guide.html">Guide</a>, <a href="/abs">Abs</a>, '
        '<a href="https://other.test/">https://other.test/</a>, <a href="#frag">Top</a>, '
        '<a href="javascript:void(0)">JS</a>, <a href="mailto:a@b">Mail</a>, '
        '<a href="x.html"><img src="i.png" alt="Logo"></a>, <a href="empty.html"></a></p>'
    )
    assert text(html) == (
        "Guide [https://docs.test/v2/guide.html], Abs [https://docs.test/abs], "
        "https://other.test/, Top, JS, Mail, Logo [https://docs.test/v2/x.html], "
        "[https://docs.test/v2/empty.html]"
    )


def test_headings_lists_quotes_tables_and_pre() -> None:
    html = (
        "<h2>Part</h2><ol><li>one<ul><li>nested</li></ul></li><li>two</li></ol>"
        "<blockquote><p>said</p></blockquote>"
        "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
        "<pre>  x = 1\n  y = 2</pre><p>line<br>break</p>"
    )
    assert text(html) == (
        "## Part\n\n- one\n  - nested\n- two\n\n> said\n\na | b\nc | d\n\n"
        "  x = 1\n  y = 2\n\nline\nbreak"
    )


def test_whitespace_and_entities() -> None:
    assert text("<p>  a\n\tb&nbsp;c &lt;tag&gt; &#x2603; </p>") == "a b c <tag> ☃"


def test_malformed_markup_is_tolerated() -> None:
    assert text("<p>open <b>bold <i>both</p><p>next</div></span>") == "open bold both\n\nnext"
    assert text("<<>>&&;<p") == "<<>>&&;<p"  # an unfinished tag at the end stays text


@given(st.text(max_size=300))
def test_any_input_gives_text_without_raising(html: str) -> None:
    page = html_to_text(html, "https://x.test/")
    assert isinstance(page.text, str)
    assert "<script" not in page.text.lower() or "<script" in html.lower()
