"""The porcelain v2 parser, on git's documented line shapes and on arbitrary input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from koboi_tools_git.porcelain import parse_status, summarize

OID = "0" * 40


def test_every_kind_of_line() -> None:
    text = "\n".join(
        [
            f"# branch.oid {OID}",
            "# branch.head feature",
            "# branch.upstream origin/feature",
            "# branch.ab +2 -3",
            f"1 M. N... 100644 100644 100644 {OID} {OID} staged file.txt",
            f"1 .D N... 100644 100644 000000 {OID} {OID} gone.txt",
            f"1 AM N... 000000 100644 100644 {OID} {OID} both.txt",
            f"2 R. N... 100644 100644 100644 {OID} {OID} R90 new name.txt\told name.txt",
            f"u UU N... 100644 100644 100644 100644 {OID} {OID} {OID} clash.txt",
            "? new dir/",
            '? "tab\\there"',
            "! ignored.txt",
            "",
        ]
    )
    status = parse_status(text)
    assert (status.branch, status.upstream, status.ahead, status.behind) == (
        "feature",
        "origin/feature",
        2,
        3,
    )
    assert status.staged == [
        "modified: staged file.txt",
        "added: both.txt",
        "renamed: old name.txt -> new name.txt",
    ]
    assert status.unstaged == ["deleted: gone.txt", "modified: both.txt"]
    assert status.conflicted == ["both modified: clash.txt"]
    assert status.untracked == ["new dir/", '"tab\\there"']
    out = summarize(status)
    assert out.splitlines()[0] == "On branch feature, tracking origin/feature: ahead 2, behind 3"
    assert out.index("Conflicted (1):") < out.index("Staged") < out.index("Not staged")


def test_detached_initial_and_truncated() -> None:
    assert summarize(parse_status(f"# branch.oid {OID}\n# branch.head (detached)\n")) == (
        f"HEAD detached at {OID[:12]}\nNothing to commit, working tree clean."
    )
    initial = parse_status(
        "# branch.oid (initial)\n# branch.head main\n? a\n? b-cut-sho", truncated=True
    )
    assert initial.untracked == ["a"]  # the cut last line is dropped
    out = summarize(initial)
    assert out.startswith("On branch main (no commits yet)")
    assert out.endswith("the lists above may be incomplete]")


def test_lists_are_capped() -> None:
    status = parse_status("".join(f"? f{i}\n" for i in range(7)))
    assert summarize(status, limit=5).splitlines()[-1] == "  ... and 2 more"


@given(st.text())
def test_any_output_parses_without_error(text: str) -> None:
    summarize(parse_status(text))
    summarize(parse_status(text, truncated=True))
