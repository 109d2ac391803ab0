"""The plugin's registration, its cost at import, and the pieces under the UI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from koboi.approval import ApprovalRequest
from koboi.tools import Risk
from koboi_cli.api import get_host
from koboi_tui.approver import Answer, ChatApprover
from koboi_tui.diffs import edit_diff

pytestmark = pytest.mark.anyio


def test_chat_is_a_command_of_plugin_tui() -> None:
    commands = get_host().catalog().commands
    chat = commands.get("chat")
    assert chat is not None and chat.plugin == "tui"
    assert chat.target == "koboi_tui.cli:app"


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, koboi_tui.plugin\n"
        "heavy = [m for m in ('textual', 'rich', 'pydantic', 'koboi.agent', 'koboi_tui.app', "
        "'koboi_tui._version') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == ""


def _request(
    name: str = "write_file", arguments: dict[str, object] | None = None
) -> ApprovalRequest:
    return ApprovalRequest(
        session_id="s1",
        step=1,
        call_id="c1",
        tool_name=name,
        arguments=arguments or {"path": "a.txt", "content": "x"},
        risk=Risk.MODERATE,
        reason="act mode",
        approval_id="ap_1",
    )


async def test_the_approver_binds_each_answer_and_remembers_always() -> None:
    answers: list[Answer] = ["no", "yes", "always"]
    asked: list[str] = []

    async def ask(request: ApprovalRequest) -> Answer:
        asked.append(request.call_id)
        return answers.pop(0)

    approver = ChatApprover(ask)
    denied = await approver.decide(_request())
    assert not denied.approved and denied.mismatch(_request()) is None
    approved = await approver.decide(_request())
    assert approved.approved and approved.scope == "once" and approved.decided_by == "chat"
    assert (approved.session_id, approved.approval_id) == ("s1", "ap_1")
    always = await approver.decide(_request())
    assert always.approved and always.scope == "always"
    again = await approver.decide(_request())  # not asked: the same tool and arguments
    assert again.approved and again.scope == "always" and len(asked) == 3
    other = _request(arguments={"path": "b.txt", "content": "x"})
    with pytest.raises(IndexError):  # other arguments are asked again (no answer left)
        await approver.decide(other)


def test_the_diff_of_an_edit_is_of_the_file(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a\nb\nc\n")
    diff = edit_diff({"path": "f.txt", "old_text": "b", "new_text": "B"}, tmp_path)
    assert diff is not None
    assert diff.splitlines() == [
        "--- a/f.txt",
        "+++ b/f.txt",
        "@@ -1,3 +1,3 @@",
        " a",
        "-b",
        "+B",
        " c",
    ]


def test_the_diff_of_a_write_a_patch_and_what_is_no_edit(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("old\n")
    written = edit_diff({"path": "f.txt", "content": "new\n"}, tmp_path)
    assert written is not None and written.splitlines()[-2:] == ["-old", "+new"]
    created = edit_diff({"path": "g.txt", "content": "hi"}, tmp_path)
    assert created is not None and created.splitlines()[:2] == ["--- /dev/null", "+++ b/g.txt"]
    # A file outside the working directory is never read: the diff is of the arguments.
    outside = edit_diff({"path": "../secret", "old_text": "x", "new_text": "y"}, tmp_path)
    assert outside is not None and outside.splitlines()[-2:] == ["-x", "+y"]
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-old\n+new\n"
    assert edit_diff({"patch": patch}, tmp_path) == patch.rstrip("\n")
    assert edit_diff({"expression": "1 + 1"}, tmp_path) is None
