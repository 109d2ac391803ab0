"""apply_patch: unified diffs over several files, all or nothing."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi.errors import ToolError
from koboi_tools_fs.patching import PatchError, apply_hunks, parse_patch, split_lines

pytestmark = pytest.mark.anyio

MULTI = (
    """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@
 import os
-DEBUG = True
+DEBUG = False
"""
    + " \n"
    + """\
 def main():
@@ -6,3 +6,4 @@ def main():
     run()
     stop()
     return 0
+# end
diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1,2 +1,2 @@
-# Old title
+# New title
 Some text.
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# Created
+by the patch
--- a/obsolete.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""
)

APP = "import os\nDEBUG = True\n\ndef main():\n    start()\n    run()\n    stop()\n    return 0\n"
README = "# Old title\nSome text.\n"


def _temps(root: Path) -> list[Path]:
    return list(root.rglob("*.koboi-tmp"))


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def project(layout: Any) -> Path:
    root: Path = layout.root
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(APP)
    (root / "README.md").write_text(README)
    (root / "obsolete.txt").write_text("bye\n")
    return root


async def test_a_multi_file_patch_applies(project: Path, tools: Any) -> None:
    result = await tools("apply_patch", patch=MULTI)
    assert result.splitlines()[0] == "patched 4 files:"
    assert "src/app.py: +2 -1" in result
    assert "docs/new.md: created, 2 lines" in result
    assert "obsolete.txt: deleted" in result
    assert (project / "src" / "app.py").read_text() == APP.replace("True", "False") + "# end\n"
    assert (project / "README.md").read_text() == "# New title\nSome text.\n"
    assert (project / "docs" / "new.md").read_text() == "# Created\nby the patch\n"
    assert not (project / "obsolete.txt").exists()
    assert not _temps(project)


async def test_a_failing_hunk_leaves_every_file_unchanged(project: Path, tools: Any) -> None:
    before = _tree(project)
    # The last hunk of README.md no longer matches: the file says something else now.
    broken = MULTI.replace(" Some text.\n", " Other text.\n")
    with pytest.raises(ToolError, match=r"hunk 1 of 'README.md'.*does not apply") as refused:
        await tools("apply_patch", patch=broken)
    assert "'Some text.'" in str(refused.value)  # says what the file has instead
    assert _tree(project) == before
    assert not (project / "docs").exists()  # not even the new file's directory


async def test_a_failure_after_some_writes_is_undone(
    project: Path, tools: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make the rename of the second file fail after the first has been replaced.
    import koboi_tools_fs.workspace as workspace

    before = _tree(project)
    real_rename = workspace.os.rename
    calls = {"n": 0}

    def failing_rename(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real_rename(*args, **kwargs)

    monkeypatch.setattr(workspace.os, "rename", failing_rename)
    with pytest.raises(ToolError, match="restored"):
        await tools("apply_patch", patch=MULTI)
    monkeypatch.setattr(workspace.os, "rename", real_rename)
    assert _tree(project) == before
    assert not _temps(project)


async def test_creating_an_existing_file_or_patching_a_missing_one(
    project: Path, tools: Any
) -> None:
    create = "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(ToolError, match=r"creates 'README\.md', which already exists"):
        await tools("apply_patch", patch=create)
    missing = "--- a/none.txt\n+++ b/none.txt\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(ToolError, match=r"'none\.txt' does not exist"):
        await tools("apply_patch", patch=missing)


async def test_hunks_at_an_offset_apply_and_say_so(project: Path, tools: Any) -> None:
    (project / "README.md").write_text("intro\nmore intro\n" + README)
    patch = "--- a/README.md\n+++ b/README.md\n@@ -1,2 +1,2 @@\n-# Old title\n+# T\n Some text.\n"
    result = await tools("apply_patch", patch=patch)
    assert "applied at line 3 (offset +2)" in result
    assert (project / "README.md").read_text() == "intro\nmore intro\n# T\nSome text.\n"


async def test_no_newline_at_end_of_file(project: Path, tools: Any) -> None:
    (project / "n.txt").write_text("a\nb")
    patch = "--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
    await tools("apply_patch", patch=patch)
    assert (project / "n.txt").read_text() == "a\nc\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("just some text\n", "no file headers"),
        ("--- a/x\n+++ b/x\n", "no hunks"),
        ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", "ends early"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", "more lines than its"),
        ("--- a/x\n+++ b/x\n@@ nonsense @@\n", "malformed hunk header"),
        ("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "does not rename"),
        ("@@ -1 +1 @@\n-a\n+b\n", "without '--- old'"),
    ],
)
async def test_malformed_patches_are_refused(
    project: Path, tools: Any, patch: str, message: str
) -> None:
    before = _tree(project)
    with pytest.raises(ToolError, match=message):
        await tools("apply_patch", patch=patch)
    assert _tree(project) == before


async def test_a_path_leaving_the_workdir_refuses_the_whole_patch(
    project: Path, tools: Any, layout: Any
) -> None:
    before = _tree(project)
    evil = MULTI + "--- a/../../secret.txt\n+++ b/../../secret.txt\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(ToolError, match=r"'\.\.'"):
        await tools("apply_patch", patch=evil)
    assert _tree(project) == before  # the valid files before it were not written either


async def test_one_file_patched_twice_in_one_diff(project: Path, tools: Any) -> None:
    first = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Old title\n+# Mid\n"
    second = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Mid\n+# Final\n"
    await tools("apply_patch", patch=first + second)
    assert (project / "README.md").read_text() == "# Final\nSome text.\n"


# -- the parser and applier, against difflib ------------------------------------------

_lines = st.lists(
    st.sampled_from(["a\n", "b\n", "c\n", "\n", "  x = 1\n", "-- x\n", "+ y\n", "++ z\n"])
)


@settings(max_examples=150, deadline=None)
@given(before=_lines, after=_lines, context=st.integers(0, 3))
def test_any_difflib_diff_applies_back(before: list[str], after: list[str], context: int) -> None:
    diff = "".join(difflib.unified_diff(before, after, "a/f.txt", "b/f.txt", n=context))
    if not diff:
        return
    (patch,) = parse_patch(diff)
    result, _ = apply_hunks(split_lines("".join(before)), patch.hunks, "f.txt")
    assert "".join(result) == "".join(after)


def test_split_lines_splits_on_newline_only() -> None:
    assert split_lines("a\r\nb\x0cc\u2028d\ne") == ["a\r\n", "b\x0cc\u2028d\n", "e"]
    assert split_lines("") == []


def test_a_hunk_whose_context_is_gone_is_refused() -> None:
    (patch,) = parse_patch("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n")
    with pytest.raises(PatchError, match="does not apply"):
        apply_hunks(["x\n", "w\n"], patch.hunks, "f")
